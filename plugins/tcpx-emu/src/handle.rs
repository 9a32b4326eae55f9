//! The 128-byte connection handle `listen` writes and `connect` reads.
//!
//! Layout (all integers little-endian unless noted):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `b"TXEM"` |
//! | 4..6 | format version ([`HANDLE_VERSION`]) |
//! | 6 | address family: 4 or 6 |
//! | 7 | data sockets per comm (the receiver's `NSOCKS_PERTHREAD x SOCKET_NTHREADS`) |
//! | 8..10 | TCP port, big-endian |
//! | 12..16 | chunk size (the receiver's `NCCL_DYNAMIC_CHUNK_SIZE`) |
//! | 16..32 | IP address (IPv4 in the first 4 bytes) |
//! | 32..36 | IPv6 scope id |
//! | 40..48 | listener token (random; echoed in every hello so a stale handle is rejected) |
//! | 48..56 | connector state pointer, 0 before the first `connect` (process-local, like TCPX) |
//! | 56..64 | the same pointer XOR `STATE_KEY`, so garbage is not taken for a pointer |
//!
//! The connector uses the receiver's socket count and chunk size so that both sides stripe
//! identically: chunks carry no header on the wire.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use nccl_net_abi::NetHandle;

use crate::config::{MAX_CHUNK_SIZE, MAX_SOCKETS};
use crate::error::{NetError, NetResult};

pub const HANDLE_MAGIC: [u8; 4] = *b"TXEM";
pub const HANDLE_VERSION: u16 = 1;
const STATE_KEY: u64 = 0x7463_7078_656d_7531; // "tcpxemu1"

/// What a connector needs to know about a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenInfo {
    pub addr: SocketAddr,
    pub nsocks: usize,
    pub chunk_size: usize,
    pub token: u64,
}

impl ListenInfo {
    /// Writes the handle, zeroing everything else (including the connector state).
    pub fn encode(&self, h: &mut NetHandle) {
        h.fill(0);
        h[0..4].copy_from_slice(&HANDLE_MAGIC);
        h[4..6].copy_from_slice(&HANDLE_VERSION.to_le_bytes());
        h[7] = self.nsocks as u8;
        h[8..10].copy_from_slice(&self.addr.port().to_be_bytes());
        h[12..16].copy_from_slice(&(self.chunk_size as u32).to_le_bytes());
        match self.addr {
            SocketAddr::V4(a) => {
                h[6] = 4;
                h[16..20].copy_from_slice(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                h[6] = 6;
                h[16..32].copy_from_slice(&a.ip().octets());
                h[32..36].copy_from_slice(&a.scope_id().to_le_bytes());
            }
        }
        h[40..48].copy_from_slice(&self.token.to_le_bytes());
    }

    /// Parses a handle, rejecting foreign or inconsistent ones with `ncclInvalidArgument`.
    pub fn decode(h: &NetHandle) -> NetResult<Self> {
        if h[0..4] != HANDLE_MAGIC {
            return Err(NetError::invalid_argument(
                "handle was not written by tcpx-emu's listen (bad magic)",
            ));
        }
        let version = u16::from_le_bytes([h[4], h[5]]);
        if version != HANDLE_VERSION {
            return Err(NetError::invalid_argument(format!(
                "handle format version {version}, expected {HANDLE_VERSION}"
            )));
        }
        let port = u16::from_be_bytes([h[8], h[9]]);
        let ip = match h[6] {
            4 => IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&h[16..32]);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            f => {
                return Err(NetError::invalid_argument(format!(
                    "handle has unknown address family {f}"
                )))
            }
        };
        let addr = match ip {
            IpAddr::V6(v6) => {
                let scope = u32::from_le_bytes([h[32], h[33], h[34], h[35]]);
                SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
            }
            v4 @ IpAddr::V4(_) => SocketAddr::new(v4, port),
        };
        let nsocks = usize::from(h[7]);
        let chunk_size = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as usize;
        if !(1..=MAX_SOCKETS).contains(&nsocks) || chunk_size == 0 || chunk_size > MAX_CHUNK_SIZE {
            return Err(NetError::invalid_argument(format!(
                "handle has nsocks {nsocks}, chunk size {chunk_size}: out of range"
            )));
        }
        let token = u64::from_le_bytes(h[40..48].try_into().unwrap_or_default());
        Ok(Self {
            addr,
            nsocks,
            chunk_size,
            token,
        })
    }
}

/// The connector state pointer stored in the handle, if any.
pub fn connect_state(h: &NetHandle) -> Option<usize> {
    let ptr = u64::from_le_bytes(h[48..56].try_into().ok()?);
    let check = u64::from_le_bytes(h[56..64].try_into().ok()?);
    (ptr != 0 && ptr ^ STATE_KEY == check).then_some(ptr as usize)
}

/// Stores (or, with 0, clears) the connector state pointer.
pub fn set_connect_state(h: &mut NetHandle, ptr: usize) {
    let ptr = ptr as u64;
    let check = if ptr == 0 { 0 } else { ptr ^ STATE_KEY };
    h[48..56].copy_from_slice(&ptr.to_le_bytes());
    h[56..64].copy_from_slice(&check.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_v4_and_v6() {
        for addr in ["127.0.0.1:4567", "[::1]:80"] {
            let info = ListenInfo {
                addr: addr.parse().expect("addr"),
                nsocks: 4,
                chunk_size: 524_288,
                token: 0xdead_beef_1234,
            };
            let mut h = [0xffu8; 128];
            info.encode(&mut h);
            assert_eq!(ListenInfo::decode(&h), Ok(info));
            assert_eq!(connect_state(&h), None);
            set_connect_state(&mut h, 0x1234_5678);
            assert_eq!(connect_state(&h), Some(0x1234_5678));
            assert_eq!(ListenInfo::decode(&h), Ok(info));
            set_connect_state(&mut h, 0);
            assert_eq!(connect_state(&h), None);
        }
    }

    #[test]
    fn foreign_handle_is_rejected() {
        let h = [7u8; 128];
        let err = ListenInfo::decode(&h).expect_err("foreign");
        assert_eq!(err.code, nccl_net_abi::NCCL_INVALID_ARGUMENT);
        assert_eq!(connect_state(&h), None);
    }
}
