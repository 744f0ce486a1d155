//! `capture`: a request checked and given the workers' hubs to follow.

use crate::capture::{CaptureGrant, CaptureSlot, MAX_CAPTURES};
use crate::protocol::{ApiError, Request};

use super::BridgeState;

impl BridgeState {
    /// Checks a capture request and picks the hubs it follows.
    pub fn capture(&self, request: Request) -> Result<CaptureGrant, ApiError> {
        let Request::Capture {
            port,
            direction,
            count,
            queue,
        } = request
        else {
            return Err(ApiError::from("not a capture request"));
        };
        let id = self.port(&port)?;
        let (inbound, outbound) = direction.takes();
        let hubs = match queue {
            None => self.captures.clone(),
            Some(queue) => vec![self.captures.get(queue).cloned().ok_or_else(|| {
                format!(
                    "no queue {queue} (the bridge has {} workers, queues 0 to {})",
                    self.captures.len(),
                    self.captures.len() - 1
                )
            })?],
        };
        let slot = CaptureSlot::take(&self.running_captures).ok_or_else(|| {
            ApiError(format!(
                "{MAX_CAPTURES} captures are running already (the most a bridge runs at once); \
                 stop one first"
            ))
        })?;
        Ok(CaptureGrant {
            request: crate::capture::Request {
                port: id,
                label: self.label(id),
                inbound,
                outbound,
                count,
            },
            hubs,
            slot,
        })
    }
}
