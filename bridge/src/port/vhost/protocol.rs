//! The backend's side of the vhost-user protocol: what each message of
//! the frontend does to the port's vrings. The `vhost` crate reads and
//! checks the messages and writes the replies; this handler keeps each
//! vring's setup as the messages build it, and starts a ring (hands it to
//! the workers through [`Device`]) once it has memory, addresses, a size,
//! a kick and, where protocol features were negotiated, an enable.
//!
//! A ring is restarted, not changed in place, when anything it depends on
//! changes (a new memory table, a new call descriptor): the swap happens
//! under the vring's mutex, between two of a worker's batches, and the new
//! ring goes on from where the old one stopped.

use std::fs::File;
use std::sync::Arc;

use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{Error, GpuBackend, Result, VhostUserBackendReqHandlerMut};
use vhost::VhostUserMemoryRegionBase;

use super::device::{
    Device, Negotiated, Running, VhostCounters, OFFERED_FEATURES, PROTOCOL_FEATURES,
};
use super::eventfd::FrontendEventfd;
use super::memory::{GuestMemory, RegionSpec};
use super::ring::{RingLayout, SplitRing, MAX_RING_SIZE};

/// The protocol features offered: several queue pairs, and acks on
/// request (which the `vhost` crate adds and answers itself).
const OFFERED_PROTOCOL: VhostUserProtocolFeatures = VhostUserProtocolFeatures::MQ;

/// One vring as the frontend has set it up so far.
#[derive(Debug, Default)]
struct Setup {
    size: u16,
    /// desc, avail, used, in the frontend's addresses.
    addresses: Option<(u64, u64, u64)>,
    base: u16,
    kick: Option<FrontendEventfd>,
    call: Option<FrontendEventfd>,
    enabled: bool,
}

/// The handler of one connection's messages.
#[derive(Debug)]
pub struct Handler {
    device: Arc<Device>,
    features: Option<u64>,
    protocol: u64,
    memory: Option<Arc<GuestMemory>>,
    setups: Vec<Setup>,
}

fn refuse(what: &'static str) -> Error {
    Error::InvalidOperation(what)
}

impl Handler {
    /// A handler for a new connection: nothing negotiated, nothing running.
    pub fn new(device: Arc<Device>) -> Handler {
        let setups = (0..device.vrings()).map(|_| Setup::default()).collect();
        Handler {
            device,
            features: None,
            protocol: 0,
            memory: None,
            setups,
        }
    }

    /// Stops every ring and forgets the device's state: the frontend reset
    /// the device. The protocol features stay as negotiated: they belong
    /// to the connection, and the `vhost` crate keeps acting on them.
    pub fn reset(&mut self) {
        for index in 0..self.setups.len() {
            self.device.update(index, |_| None);
        }
        self.features = None;
        self.memory = None;
        for setup in &mut self.setups {
            *setup = Setup::default();
        }
    }

    /// Whether SET_FEATURES took PROTOCOL_FEATURES.
    pub fn protocol_features_acked(&self) -> bool {
        self.features.is_some_and(|f| f & PROTOCOL_FEATURES != 0)
    }

    /// Whether REPLY_ACK was negotiated.
    pub fn reply_ack(&self) -> bool {
        self.protocol & VhostUserProtocolFeatures::REPLY_ACK.bits() != 0
    }

    /// SET_VRING_ENABLE before SET_FEATURES (see `control::early_enable`):
    /// recorded for when the ring starts. False for a vring there is not.
    pub fn enable_early(&mut self, index: u32, enable: bool) -> bool {
        match self.setups.get_mut(index as usize) {
            Some(setup) => {
                setup.enabled = enable;
                true
            }
            None => false,
        }
    }

    fn setup(&mut self, index: u32) -> Result<&mut Setup> {
        self.setups
            .get_mut(index as usize)
            .ok_or(Error::InvalidParam)
    }

    /// Starts, restarts or stops vring `index` as its setup now says. A
    /// ring that ran goes on from where it stopped unless `rebase`.
    fn refresh(&mut self, index: usize, rebase: bool) {
        let negotiated = Negotiated {
            features: self.features.unwrap_or(0),
        };
        let protocol = negotiated.features & PROTOCOL_FEATURES != 0;
        let setup = &mut self.setups[index];
        let want = self.features.is_some()
            && setup.size > 0
            && setup.kick.is_some()
            && (setup.enabled || !protocol);
        let (memory, addresses) = match (&self.memory, setup.addresses) {
            (Some(memory), Some(addresses)) if want => (memory.clone(), addresses),
            _ => {
                if let Some(old) = self.device.update(index, |_| None) {
                    setup.base = old.ring.next_avail();
                }
                return;
            }
        };
        let counters = &self.device.counters;
        let name = self.device.name();
        let mut base = setup.base;
        let (desc, avail, used) = addresses;
        let layout = RingLayout {
            size: setup.size,
            desc,
            avail,
            used,
        };
        let kick = setup.kick.as_ref().and_then(|f| f.try_clone().ok());
        let call = setup.call.as_ref().and_then(|f| f.try_clone().ok());
        let old = self.device.update(index, |old| {
            if let (Some(old), false) = (old, rebase) {
                base = old.ring.next_avail();
            }
            let ring = match SplitRing::new(memory, layout, base, negotiated.event_idx()) {
                Ok(ring) => ring,
                Err(error) => {
                    VhostCounters::bump(&counters.bad_rings);
                    log::warn!("{name}: vring {index}: {error}");
                    return None;
                }
            };
            Some(Running {
                ring,
                negotiated,
                kick: kick?,
                call,
            })
        });
        if old.is_some() && !rebase {
            setup.base = base;
        }
    }

    /// Takes a kick or call descriptor if it is an eventfd; anything else
    /// breaks the protocol.
    fn eventfd(&self, file: File, what: &'static str) -> Result<FrontendEventfd> {
        FrontendEventfd::new(file, what).map_err(|error| {
            log::warn!("{}: {error}", self.device.name());
            refuse(match what {
                "kick" => "a kick descriptor that is not an eventfd",
                _ => "a call descriptor that is not an eventfd",
            })
        })
    }

    fn refresh_all(&mut self) {
        for index in 0..self.setups.len() {
            self.refresh(index, false);
        }
    }
}

impl VhostUserBackendReqHandlerMut for Handler {
    fn set_owner(&mut self) -> Result<()> {
        Ok(())
    }

    fn reset_owner(&mut self) -> Result<()> {
        self.reset();
        Ok(())
    }

    fn reset_device(&mut self) -> Result<()> {
        self.reset();
        Ok(())
    }

    fn get_features(&mut self) -> Result<u64> {
        Ok(OFFERED_FEATURES)
    }

    fn set_features(&mut self, features: u64) -> Result<()> {
        log::debug!("{}: SET_FEATURES {features:#x}", self.device.name());
        if features & !OFFERED_FEATURES != 0 {
            return Err(Error::InvalidParam);
        }
        self.features = Some(features);
        self.refresh_all();
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        regions: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy: Option<bool>,
    ) -> Result<Option<Vec<VhostUserMemoryRegionBase>>> {
        let specs: Vec<RegionSpec> = regions
            .iter()
            .map(|r| RegionSpec {
                guest_phys_addr: r.guest_phys_addr,
                memory_size: r.memory_size,
                user_addr: r.user_addr,
                mmap_offset: r.mmap_offset,
            })
            .collect();
        let total = specs
            .iter()
            .try_fold(0u64, |sum, spec| sum.checked_add(spec.memory_size));
        let max = self.device.max_memory();
        if total.is_none_or(|total| total > max) {
            VhostCounters::bump(&self.device.counters.bad_memory);
            log::warn!(
                "{}: memory table refused: {} bytes, over the port's max_memory of {max}",
                self.device.name(),
                total.map_or_else(|| "more than 2^64".to_owned(), |t| t.to_string()),
            );
            return Err(Error::InvalidParam);
        }
        match GuestMemory::map(&specs, files) {
            Ok(memory) => {
                self.memory = Some(Arc::new(memory));
                self.refresh_all();
                Ok(None)
            }
            Err(error) => {
                VhostCounters::bump(&self.device.counters.bad_memory);
                log::warn!("{}: memory table refused: {error}", self.device.name());
                Err(Error::InvalidParam)
            }
        }
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> Result<()> {
        let size = u16::try_from(num)
            .ok()
            .filter(|&n| n > 0 && n <= MAX_RING_SIZE && n.is_power_of_two())
            .ok_or(Error::InvalidParam)?;
        self.setup(index)?.size = size;
        self.refresh(index as usize, false);
        Ok(())
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> Result<()> {
        self.setup(index)?.addresses = Some((descriptor, available, used));
        self.refresh(index as usize, false);
        Ok(())
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> Result<()> {
        let base = u16::try_from(base).map_err(|_| Error::InvalidParam)?;
        self.setup(index)?.base = base;
        self.refresh(index as usize, true);
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> Result<VhostUserVringState> {
        log::debug!("{}: GET_VRING_BASE {index}", self.device.name());
        let setup = self.setup(index)?;
        // The ring stops here, until the frontend kicks it off again.
        setup.kick = None;
        let old = self.device.update(index as usize, |_| None);
        let setup = self.setup(index)?;
        if let Some(old) = old {
            setup.base = old.ring.next_avail();
        }
        Ok(VhostUserVringState::new(index, u32::from(setup.base)))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        // A frontend that polls (no kick) cannot wake a sleeping worker.
        let kick = fd.ok_or(refuse("a vring without a kick descriptor"))?;
        let kick = self.eventfd(kick, "kick")?;
        self.setup(u32::from(index))?.kick = Some(kick);
        self.refresh(usize::from(index), false);
        Ok(())
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let call = fd.map(|call| self.eventfd(call, "call")).transpose()?;
        self.setup(u32::from(index))?.call = call;
        self.refresh(usize::from(index), false);
        Ok(())
    }

    fn set_vring_err(&mut self, index: u8, _fd: Option<File>) -> Result<()> {
        // Errors are counted and logged here, not signalled.
        self.setup(u32::from(index)).map(|_| ())
    }

    fn get_protocol_features(&mut self) -> Result<VhostUserProtocolFeatures> {
        Ok(OFFERED_PROTOCOL)
    }

    fn set_protocol_features(&mut self, features: u64) -> Result<()> {
        log::debug!(
            "{}: SET_PROTOCOL_FEATURES {features:#x}",
            self.device.name()
        );
        let known = (OFFERED_PROTOCOL | VhostUserProtocolFeatures::REPLY_ACK).bits();
        if features & !known != 0 {
            return Err(Error::InvalidParam);
        }
        self.protocol = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> Result<u64> {
        Ok(self.device.pairs() as u64)
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> Result<()> {
        self.setup(index)?.enabled = enable;
        self.refresh(index as usize, false);
        Ok(())
    }

    fn get_config(&mut self, _: u32, _: u32, _: VhostUserConfigFlags) -> Result<Vec<u8>> {
        Err(refuse("config space"))
    }

    fn set_config(&mut self, _: u32, _: &[u8], _: VhostUserConfigFlags) -> Result<()> {
        Err(refuse("config space"))
    }

    fn set_gpu_socket(&mut self, _: GpuBackend) -> Result<()> {
        Err(refuse("gpu socket"))
    }

    fn get_shared_object(&mut self, _: VhostUserSharedMsg) -> Result<File> {
        Err(refuse("shared objects"))
    }

    fn get_inflight_fd(&mut self, _: &VhostUserInflight) -> Result<(VhostUserInflight, File)> {
        Err(refuse("inflight tracking"))
    }

    fn set_inflight_fd(&mut self, _: &VhostUserInflight, _: File) -> Result<()> {
        Err(refuse("inflight tracking"))
    }

    fn get_max_mem_slots(&mut self) -> Result<u64> {
        Err(refuse("memory slots"))
    }

    fn add_mem_region(
        &mut self,
        _: &VhostUserSingleMemoryRegion,
        _: File,
        _: Option<bool>,
    ) -> Result<Option<VhostUserMemoryRegionBase>> {
        Err(refuse("memory slots"))
    }

    fn remove_mem_region(&mut self, _: &VhostUserSingleMemoryRegion) -> Result<()> {
        Err(refuse("memory slots"))
    }

    fn set_device_state_fd(
        &mut self,
        _: VhostTransferStateDirection,
        _: VhostTransferStatePhase,
        _: File,
    ) -> Result<Option<File>> {
        Err(refuse("device state"))
    }

    fn check_device_state(&mut self) -> Result<()> {
        Err(refuse("device state"))
    }

    fn get_shmem_config(&mut self) -> Result<VhostUserShMemConfig> {
        Err(refuse("shared memory"))
    }

    fn set_log_base(&mut self, _: &VhostUserLog, _: File) -> Result<()> {
        Err(refuse("dirty logging"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_reset_keeps_the_protocol_features() {
        let device = Arc::new(Device::new("test", 1, 1 << 30).unwrap());
        let mut handler = Handler::new(device);
        handler.set_features(PROTOCOL_FEATURES).unwrap();
        let protocol = (OFFERED_PROTOCOL | VhostUserProtocolFeatures::REPLY_ACK).bits();
        handler.set_protocol_features(protocol).unwrap();
        assert!(handler.reply_ack() && handler.protocol_features_acked());
        handler.reset_device().unwrap();
        assert!(
            handler.reply_ack(),
            "the connection's protocol features stay"
        );
        assert!(
            !handler.protocol_features_acked(),
            "the device's features are gone"
        );
        handler.reset_owner().unwrap();
        assert!(handler.reply_ack());
    }
}
