//! vhost-user message sequences, as a frontend may send them in any order,
//! through the backend's handler (`port/vhost/protocol.rs`) the way the
//! control thread (`control.rs`) hands them over: SET_VRING_ENABLE before
//! the features took PROTOCOL_FEATURES goes to `enable_early`, as the
//! control thread's peek does; a disconnection resets the handler.
//!
//! A model written here follows the setup of each of the device's four
//! vrings. After every message: the handler never panics; it refuses
//! exactly what the model refuses; a vring runs exactly when the model
//! says it must: features set, a memory table, addresses whose areas lie
//! in one region each and are aligned, a size, a kick, and, where the
//! features took PROTOCOL_FEATURES, an enable (given before the features
//! or after); a running ring starts at the base the frontend set (or
//! where the last one stopped), which GET_VRING_BASE answers.

#![no_main]

use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::Arc;

use arbitrary::Arbitrary;
use bridge::port::vhost::fuzzing::{
    self, Device, Handler, VhostUserBackendReqHandlerMut, VhostUserMemoryRegion,
    VhostUserVringAddrFlags, PROTOCOL_FEATURES,
};
use bridge::port::vhost::OFFERED_FEATURES;
use libfuzzer_sys::fuzz_target;

const VRINGS: usize = 4;
const USER: u64 = 0x7f00_0000_0000;
const FILE_LEN: u64 = 64 * 1024;
const MAX_MEMORY: u64 = 48 * 1024;

#[derive(Debug, Arbitrary)]
enum Fd {
    Eventfd,
    None,
    /// A memfd: not an eventfd.
    Other,
}

#[derive(Debug, Arbitrary)]
enum Message {
    SetFeatures {
        bits: u64,
        raw: bool,
    },
    SetProtocolFeatures(u64),
    /// Regions in pages: guest page, pages, file page; user addresses
    /// follow the guest's.
    SetMemTable(Vec<(u8, u8, u8)>),
    SetVringNum {
        index: u8,
        num: u32,
    },
    SetVringAddr {
        index: u8,
        desc: u32,
        avail: u32,
        used: u32,
    },
    SetVringBase {
        index: u8,
        base: u32,
    },
    GetVringBase(u8),
    SetVringKick(u8, Fd),
    SetVringCall(u8, Fd),
    /// SET_VRING_ENABLE with `num`, however the control thread routes it.
    SetVringEnable {
        index: u32,
        num: u32,
    },
    ResetOwner,
    ResetDevice,
    Disconnect,
    /// A frontend's ordinary setup of vring `index` (as QEMU does it, with
    /// the enable before the features when `enable_first`), sent as the
    /// messages above: a start from which the others wander.
    Standard {
        index: u8,
        enable_first: bool,
    },
}

#[derive(Debug, Default, Clone)]
struct Setup {
    size: u16,
    addresses: Option<(u64, u64, u64)>,
    base: u16,
    kick: bool,
    enabled: bool,
}

#[derive(Debug, Default)]
struct Model {
    features: Option<u64>,
    /// The regions of the table in force: (guest, size), user = USER + guest.
    memory: Option<Vec<(u64, u64)>>,
    setups: [Setup; VRINGS],
}

impl Model {
    fn reset(&mut self) {
        self.features = None;
        self.memory = None;
        self.setups = Default::default();
    }

    fn protocol(&self) -> bool {
        self.features.is_some_and(|f| f & PROTOCOL_FEATURES != 0)
    }

    /// Whether `len` bytes at user address `addr`, aligned to `align`, lie
    /// in one region.
    fn area(&self, addr: u64, len: u64, align: u64) -> bool {
        let Some(regions) = &self.memory else {
            return false;
        };
        addr % align == 0
            && regions.iter().any(|&(guest, size)| {
                addr.checked_sub(USER + guest)
                    .is_some_and(|offset| offset + len <= size)
            })
    }

    fn runs(&self, index: usize) -> bool {
        let s = &self.setups[index];
        let n = u64::from(s.size);
        self.features.is_some()
            && s.size > 0
            && s.kick
            && (s.enabled || !self.protocol())
            && s.addresses.is_some_and(|(desc, avail, used)| {
                self.area(desc, 16 * n, 16)
                    && self.area(avail, 6 + 2 * n, 2)
                    && self.area(used, 6 + 8 * n, 4)
            })
    }
}

fn memfd(len: u64) -> File {
    let fd = nix::sys::memfd::memfd_create(c"fuzz", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .expect("memfd");
    let file = File::from(fd);
    file.set_len(len).expect("the memfd grows");
    file
}

fn eventfd() -> File {
    // SAFETY: constant arguments; the descriptor is checked and owned at once.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd");
    // SAFETY: `fd` is a new descriptor nothing else owns.
    unsafe { File::from_raw_fd(fd) }
}

fn fd(kind: &Fd) -> Option<File> {
    match kind {
        Fd::Eventfd => Some(eventfd()),
        Fd::None => None,
        Fd::Other => Some(memfd(0)),
    }
}

fn address(a: u32) -> u64 {
    (USER - 0x1000).wrapping_add(u64::from(a))
}

fuzz_target!(|messages: Vec<Message>| {
    if messages.len() > 64 {
        return;
    }
    let device = Arc::new(Device::new("fuzz", VRINGS / 2, MAX_MEMORY).expect("a device"));
    let mut handler = Handler::new(Arc::clone(&device));
    let mut model = Model::default();
    for message in messages {
        let sequence = match message {
            Message::Standard {
                index,
                enable_first,
            } => standard(index, enable_first),
            message => vec![message],
        };
        for message in &sequence {
            apply(&device, &mut handler, &mut model, message);
        }
    }
});

/// A frontend's ordinary setup of vring `index`: one region of 48 KiB at
/// guest address 0, a ring of 256 at its start.
fn standard(index: u8, enable_first: bool) -> Vec<Message> {
    let index = index % VRINGS as u8;
    let mut out = Vec::new();
    let enable = Message::SetVringEnable {
        index: u32::from(index),
        num: 1,
    };
    if enable_first {
        out.push(Message::SetVringEnable {
            index: u32::from(index),
            num: 1,
        });
    }
    out.push(Message::SetFeatures {
        bits: OFFERED_FEATURES,
        raw: false,
    });
    out.push(Message::SetMemTable(vec![(0, 12, 0)]));
    out.push(Message::SetVringNum { index, num: 256 });
    out.push(Message::SetVringAddr {
        index,
        desc: 0x1000,
        avail: 0x2000,
        used: 0x3000,
    });
    out.push(Message::SetVringBase { index, base: 0 });
    out.push(Message::SetVringKick(index, Fd::Eventfd));
    if !enable_first {
        out.push(enable);
    }
    out
}

/// Hands `message` to the handler as the control thread would, and checks
/// the outcome and every vring against the model.
fn apply(device: &Device, handler: &mut Handler, model: &mut Model, message: &Message) {
    {
        match message {
            Message::SetFeatures { bits, raw } => {
                let features = if *raw { *bits } else { bits & OFFERED_FEATURES };
                let ok = features & !OFFERED_FEATURES == 0;
                assert_eq!(handler.set_features(features).is_ok(), ok);
                if ok {
                    model.features = Some(features);
                }
            }
            Message::SetProtocolFeatures(bits) => {
                // MQ and REPLY_ACK are what the handler knows.
                let ok = bits & !0x9 == 0;
                assert_eq!(handler.set_protocol_features(*bits).is_ok(), ok);
            }
            Message::SetMemTable(regions) => {
                if regions.len() > 8 {
                    return;
                }
                let table: Vec<(u64, u64, u64)> = regions
                    .iter()
                    .map(|&(g, p, o)| {
                        (
                            u64::from(g) * 4096,
                            u64::from(p % 20) * 4096,
                            u64::from(o % 20) * 4096,
                        )
                    })
                    .collect();
                let messages: Vec<VhostUserMemoryRegion> = table
                    .iter()
                    .map(|&(g, size, o)| VhostUserMemoryRegion::new(g, size, USER + g, o))
                    .collect();
                let file = memfd(FILE_LEN);
                let files = table.iter().map(|_| file.try_clone().unwrap()).collect();
                let total: u64 = table.iter().map(|r| r.1).sum();
                let ok = total <= MAX_MEMORY
                    && table
                        .iter()
                        .all(|&(_, size, o)| size > 0 && o + size <= FILE_LEN)
                    && table.iter().enumerate().all(|(i, a)| {
                        table[i + 1..]
                            .iter()
                            .all(|b| a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0)
                    });
                let got = handler.set_mem_table(&messages, files, None);
                assert_eq!(got.is_ok(), ok, "{table:x?}");
                if ok {
                    model.memory = Some(table.iter().map(|&(g, size, _)| (g, size)).collect());
                }
            }
            Message::SetVringNum { index, num } => {
                let num = num % 70_000;
                let ok = usize::from(*index) < VRINGS
                    && num > 0
                    && num <= 32_768
                    && num.is_power_of_two();
                assert_eq!(handler.set_vring_num(u32::from(*index), num).is_ok(), ok);
                if ok {
                    model.setups[usize::from(*index)].size = num as u16;
                }
            }
            Message::SetVringAddr {
                index,
                desc,
                avail,
                used,
            } => {
                let (desc, avail, used) = (address(*desc), address(*avail), address(*used));
                let ok = usize::from(*index) < VRINGS;
                let got = handler.set_vring_addr(
                    u32::from(*index),
                    VhostUserVringAddrFlags::empty(),
                    desc,
                    used,
                    avail,
                    0,
                );
                assert_eq!(got.is_ok(), ok);
                if ok {
                    model.setups[usize::from(*index)].addresses = Some((desc, avail, used));
                }
            }
            Message::SetVringBase { index, base } => {
                let base = base % 70_000;
                let ok = usize::from(*index) < VRINGS && base <= 0xffff;
                assert_eq!(handler.set_vring_base(u32::from(*index), base).is_ok(), ok);
                if ok {
                    model.setups[usize::from(*index)].base = base as u16;
                }
            }
            Message::GetVringBase(index) => match handler.get_vring_base(u32::from(*index)) {
                Ok(state) => {
                    let setup = &mut model.setups[usize::from(*index)];
                    let (num, at) = (state.num, state.index);
                    assert_eq!(num, u32::from(setup.base));
                    assert_eq!(at, u32::from(*index));
                    setup.kick = false;
                }
                Err(_) => assert!(usize::from(*index) >= VRINGS),
            },
            Message::SetVringKick(index, kind) => {
                let ok = usize::from(*index) < VRINGS && matches!(kind, Fd::Eventfd);
                assert_eq!(handler.set_vring_kick(*index, fd(kind)).is_ok(), ok);
                if ok {
                    model.setups[usize::from(*index)].kick = true;
                }
            }
            Message::SetVringCall(index, kind) => {
                let ok = usize::from(*index) < VRINGS && !matches!(kind, Fd::Other);
                assert_eq!(handler.set_vring_call(*index, fd(kind)).is_ok(), ok);
            }
            Message::SetVringEnable { index, num } => {
                let (index, num) = (index % 8, num % 3);
                let valid = (index as usize) < VRINGS;
                if !handler.protocol_features_acked() {
                    // The control thread's early path: anything but a
                    // known vring and 0 or 1 closes the connection.
                    let ok = valid && num <= 1;
                    let got = num <= 1 && handler.enable_early(index, num == 1);
                    assert_eq!(got, ok);
                    if ok {
                        model.setups[index as usize].enabled = num == 1;
                    } else {
                        handler.reset();
                        model.reset();
                    }
                } else if num <= 1 {
                    // The vhost crate passes 0 and 1 only.
                    assert_eq!(handler.set_vring_enable(index, num == 1).is_ok(), valid);
                    if valid {
                        model.setups[index as usize].enabled = num == 1;
                    }
                }
            }
            Message::ResetOwner => {
                handler.reset_owner().unwrap();
                model.reset();
            }
            Message::ResetDevice => {
                handler.reset_device().unwrap();
                model.reset();
            }
            Message::Disconnect => {
                handler.reset();
                model.reset();
            }
            Message::Standard { .. } => unreachable!("expanded"),
        }
        for index in 0..VRINGS {
            let runs = model.runs(index);
            assert_eq!(
                fuzzing::running(device, index),
                runs,
                "vring {index} after {message:?}: {model:x?}"
            );
            if runs {
                let (next_avail, _) = fuzzing::position(device, index).unwrap();
                assert_eq!(next_avail, model.setups[index].base, "vring {index}");
            }
        }
    }
}
