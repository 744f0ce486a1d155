//! `capture`: a request checked and given the workers' hubs to follow.

use crate::api_error::ApiError;
use crate::capture::{CaptureGrant, CaptureSlot, MAX_CAPTURES};
use crate::protocol::Request;

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
            return Err(ApiError::NotCapture);
        };
        let id = self.port(&port)?;
        let (inbound, outbound) = direction.takes();
        let hubs = match queue {
            None => self.captures.clone(),
            Some(queue) => {
                vec![self
                    .captures
                    .get(queue)
                    .cloned()
                    .ok_or(ApiError::NoSuchQueue {
                        queue,
                        workers: self.captures.len(),
                    })?]
            }
        };
        let slot = CaptureSlot::take(&self.running_captures)
            .ok_or(ApiError::TooManyCaptures { most: MAX_CAPTURES })?;
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
