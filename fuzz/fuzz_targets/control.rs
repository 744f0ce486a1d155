//! The control protocol and `--port` specs, as a client or a
//! configuration file hands them to the daemon. The daemon's own parsing
//! code is compiled in from `bin/mpbridge/` (see docs/fuzzing.md):
//!
//! - Any bytes, as one request line, read as the daemon reads it
//!   (`protocol::read_request`), give a request or a refusal: a reply with
//!   `ok` false and a reason, which serialises to one line (no newline)
//!   and parses back to itself.
//! - A request read serialises (with the version) to one line that reads
//!   back as the same request.
//! - Any UTF-8 text as a `--port` spec (a `port-add`'s port is parsed as
//!   the request is read, and must describe itself the same way):
//!   `PortSpec::parse` never panics; what it accepts is described by
//!   `describe()` as a spec that parses back to the same port, and is
//!   described the same again; what it refuses, it says why, in one line
//!   when the spec is one line.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../bin/mpbridge/protocol.rs"]
mod protocol;

#[allow(dead_code)]
#[path = "../../bin/mpbridge/port_options.rs"]
mod port_options;

#[allow(dead_code)]
#[path = "../../bin/mpbridge/ports.rs"]
mod ports;

use ports::PortSpec;
use protocol::{read_request, ReplyLine, Request, RequestLine, VERSION};

fn check_spec(text: &str) {
    match PortSpec::parse(text) {
        Ok(spec) => {
            let described = spec.describe();
            let again = PortSpec::parse(&described)
                .unwrap_or_else(|e| panic!("{text:?} described as {described:?}: {e}"));
            assert_eq!(again, spec, "{text:?} described as {described:?}");
            assert_eq!(again.describe(), described);
        }
        Err(why) => {
            assert!(!why.is_empty());
            if !text.contains(['\n', '\r']) {
                assert!(!why.contains('\n'), "{why:?}");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match read_request(data) {
        Ok(request) => {
            let line = serde_json::to_string(&RequestLine {
                version: VERSION,
                request: request.clone(),
            })
            .expect("a request serialises");
            assert!(!line.contains('\n'));
            assert_eq!(read_request(line.as_bytes()).ok(), Some(request.clone()));
            // A port-add's port was parsed as it was read: it describes
            // itself as a spec that parses back to it.
            if let Request::PortAdd { port, .. } = &request {
                let described = port.describe();
                let again = PortSpec::parse(&described)
                    .unwrap_or_else(|e| panic!("{port:?} described as {described:?}: {e}"));
                assert_eq!(&again, port, "described as {described:?}");
            }
        }
        Err(reply) => {
            assert!(!reply.ok && reply.result.is_none());
            assert!(reply.error.as_ref().is_some_and(|e| !e.is_empty()));
            let line = serde_json::to_string(&reply).expect("a reply serialises");
            assert!(!line.contains('\n'), "{line}");
            let back: ReplyLine = serde_json::from_str(&line).expect("a reply reads back");
            assert_eq!(back, reply);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        check_spec(text);
    }
});
