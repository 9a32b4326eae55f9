//! What the real GPUDirect-TCPX plugin demands of its caller, one named check per contract.
//!
//! A caller that breaks one of these fails on real TCPX (an error, a crash, `exit(1)` or a hang),
//! so tcpx-emu refuses it by default (`TCPXEMU_STRICT=1`) with a one-line error that names the
//! contract, its source in TCPX and the fix. `TCPXEMU_STRICT=0` restores the lenient behaviour
//! for experiments. The entry points (`lib.rs`, [`crate::conn`], [`crate::comm`]) enforce them;
//! the tests provoke each refusal and read the same constants, and the README's "TCPX contracts"
//! section lists them with their tests.
//!
//! Source references are to google/nccl-plugin-gpudirecttcpx @4b8ea7f (3.1.9) and NVIDIA/nccl
//! @5067397c (`/work/shared/reference/tcpx-contracts.md` numbers the contracts the same way).

use std::fmt::Display;

use nccl_net_abi::{NcclResult, NCCL_INTERNAL_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE};

use crate::error::NetError;
use crate::scramble::{MAX_DESCRIPTORS, MAX_RECV, PAGE};

/// One TCPX contract: its number in `tcpx-contracts.md`, a short name, and where TCPX (or NCCL)
/// shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contract {
    pub id: u8,
    pub name: &'static str,
    pub source: &'static str,
}

impl Contract {
    /// The refusal: `TCPX contract #N (name): <detail> [source]; <fix>`, on one line.
    pub fn refuse(&self, code: NcclResult, detail: impl Display, fix: impl Display) -> NetError {
        NetError::new(
            code,
            format!(
                "TCPX contract #{} ({}): {detail} [TCPX: {}]; {fix}",
                self.id, self.name, self.source
            ),
        )
    }

    /// The tag every refusal of this contract starts with (for tests and log searches).
    pub fn tag(&self) -> String {
        format!("TCPX contract #{} ({})", self.id, self.name)
    }
}

/// The escape hatch every refusal mentions last.
const LENIENT: &str = "TCPXEMU_STRICT=0 allows it in tcpx-emu only";

pub const V7_INT_SIZES: Contract = Contract {
    id: 1,
    name: "v7 int sizes",
    source: "nccl_plugin.cc exports only ncclNetPlugin_v7; net_tcpx.cc:771 tcpxRegMr(int size), :898/:921 isend/irecv(int size)",
};
pub const FRAGMENTS_PER_RECV: Contract = Contract {
    id: 2,
    name: "at most 2048 fragments per receive",
    source: "sock/tcpx.h:183-186 and net_tcpx.cc:1350-1352 exit(1) past TCPX_UNPACK_MAX_SLICE_PAGES",
};
pub const CUDA_REG_ALIGNMENT: Contract = Contract {
    id: 4,
    name: "CUDA registrations page-aligned, page-multiple length",
    source: "net_tcpx.cc:793 tcpxRegMr refuses an address not 4096-aligned; gpu/tx_pool.cu:109 cuMemGetHandleForAddressRange(buf, size)",
};
pub const IRECV_N1: Contract = Contract {
    id: 5,
    name: "irecv with n == 1",
    source: "net_tcpx.cc:926 tcpxIrecv_v5",
};
pub const FIFO_TEST: Contract = Contract {
    id: 6,
    name: "test in FIFO order",
    source: "net_tcpx.cc:1319-1328 tcpxTest",
};
pub const MAX_REQUESTS: Contract = Contract {
    id: 7,
    name: "16 requests per comm",
    source: "work_queue.h:20 MAX_REQUESTS; net_tcpx.cc:1477-1543 tcpxIrecvConsumed frees a receive slot",
};
pub const NO_IFLUSH: Contract = Contract {
    id: 9,
    name: "iflush must not be called",
    source: "net_tcpx.cc:946-954 tcpxIflush_v5 dereferences request[0], which NCCL passes uninitialised",
};
pub const DEVICE_HANDLE: Contract = Contract {
    id: 10,
    name: "accept needs a device handle",
    source:
        "net_tcpx.cc:764-767 tcpxAccept_v5 writes through *recvDevHandle; without one the first irecv dereferences NULL",
};
pub const ONE_ACCEPT: Contract = Contract {
    id: 11,
    name: "one accept per listen comm",
    source: "connect.cc:832-868 tcpxAcceptV5_v5 frees accept_args without resetting lComm->accept_args",
};
pub const DYNAMIC_CHUNK_SIZE: Contract = Contract {
    id: 13,
    name: "NCCL_DYNAMIC_CHUNK_SIZE must be set",
    source: "net_tcpx.cc:87 TCPX_PARAM(DynamicChunkSize, 0), :1217 chunk = min(kDynamicChunkSize, ...) = 0 bytes",
};

/// #6, second half: [`crate::comm`] releases queued requests to the helper threads only in
/// `test`. Also enforced by construction (README): #8 (`test` never writes sizes unless
/// `TCPXEMU_REPORT_SIZES=1`) and #17 (fragments of any length and alignment,
/// [`crate::scramble`]).
pub const DATA_MOVES_IN_TEST: Contract = Contract {
    id: 6,
    name: "data moves only inside test",
    source: "net_tcpx.cc:1099-1308 tcpxCommProgress runs in tcpxTest on the caller's thread",
};

/// The setup cost model (#12), off unless `TCPXEMU_CONNECT_MS` is set.
pub const SETUP_LATENCY: Contract = Contract {
    id: 12,
    name: "connect/accept take (nsocks+1) x 100 ms plus the flow-steering wait",
    source: "connect.cc:623 and :762 usleep(100 ms) per socket, :806-811 PROGRAM_FLOW_STEERING_WAIT_MICROS",
};

/// #1: a v7 `int` size must not be negative.
pub fn v7_size(what: &str, size: i32) -> Result<usize, NetError> {
    usize::try_from(size).map_err(|_| {
        V7_INT_SIZES.refuse(
            NCCL_INVALID_ARGUMENT,
            format!("negative {what} size {size} (a v7 int cannot express 2^31 bytes or more)"),
            "pass sizes in 0..2^31 and split larger buffers",
        )
    })
}

/// Bytes of payload in one devmem fragment at `mtu`: the packet's TCP payload (MTU minus 52
/// bytes of IPv4, TCP and timestamp headers), at most one 4 KiB page.
pub fn fragment_bytes(mtu: u32) -> usize {
    (mtu as usize).saturating_sub(52).clamp(1, PAGE)
}

/// #2: the largest CUDA receive TCPX survives: 2048 fragments of [`fragment_bytes`] each, and
/// at most NCCL's `NET_UNPACK_MAX_SLICE_SIZE` (4 MiB) per receive, which the metadata ring and
/// tcpx-emu's bounce slots are sized for. 4 MiB at MTU 8244 or on `lo`, 2,883,584 at MTU 1460.
pub fn max_cuda_recv(mtu: u32) -> usize {
    (MAX_DESCRIPTORS * fragment_bytes(mtu)).min(MAX_RECV)
}

/// #2: refuses a CUDA receive above [`max_cuda_recv`].
pub fn cuda_recv_size(size: usize, mtu: u32) -> Result<(), NetError> {
    let limit = max_cuda_recv(mtu);
    if size <= limit {
        return Ok(());
    }
    Err(FRAGMENTS_PER_RECV.refuse(
        NCCL_INVALID_ARGUMENT,
        format!(
            "CUDA receive of {size} bytes exceeds the per-request limit of {limit} bytes ({MAX_DESCRIPTORS} fragments of {} bytes at MTU {mtu}, at most {MAX_RECV})",
            fragment_bytes(mtu)
        ),
        format!("post CUDA receives of at most {limit} bytes (TCPX exits the process)"),
    ))
}

/// #4: a CUDA registration must start on a 4 KiB page and span whole pages.
pub fn cuda_registration(addr: usize, size: usize) -> Result<(), NetError> {
    if !addr.is_multiple_of(PAGE) {
        return Err(CUDA_REG_ALIGNMENT.refuse(
            NCCL_INTERNAL_ERROR,
            format!("CUDA registration at {addr:#x} is not {PAGE}-byte aligned"),
            format!("register from a {PAGE}-aligned address; {LENIENT}"),
        ));
    }
    if size == 0 || !size.is_multiple_of(PAGE) {
        return Err(CUDA_REG_ALIGNMENT.refuse(
            NCCL_INTERNAL_ERROR,
            format!("CUDA registration of {size} bytes is not a positive multiple of {PAGE}"),
            format!(
                "round the length up to the page ({}), as NCCL does; {LENIENT}",
                size.max(1).next_multiple_of(PAGE)
            ),
        ));
    }
    Ok(())
}

/// #5: `irecv` takes exactly one buffer.
pub fn irecv_n(n: i32) -> Result<(), NetError> {
    if n == 1 {
        return Ok(());
    }
    Err(IRECV_N1.refuse(
        NCCL_INTERNAL_ERROR,
        format!("irecv with n = {n}"),
        "post one receive per call (maxRecvs is 1)",
    ))
}

/// #9: `iflush` is refused (TCPX crashes in it).
pub fn iflush() -> NetError {
    NO_IFLUSH.refuse(
        NCCL_INTERNAL_ERROR,
        "iflush called",
        format!("never flush TCPX receives (its test reports no sizes, so NCCL never does); {LENIENT}"),
    )
}

/// #10: `accept` must get a pointer to a caller-owned device handle.
pub fn device_handle(outer_null: bool) -> NetError {
    let what = if outer_null {
        "accept called with recvDevHandle == NULL"
    } else {
        "accept called with *recvDevHandle == NULL"
    };
    DEVICE_HANDLE.refuse(
        NCCL_INVALID_ARGUMENT,
        what,
        format!("pass a pointer to your own ncclNetDeviceHandle_v7_t; {LENIENT}"),
    )
}

/// #11: a listen comm serves one accept.
pub fn second_accept() -> NetError {
    ONE_ACCEPT.refuse(
        NCCL_INVALID_USAGE,
        "accept called again on a listen comm that already returned its receive comm",
        format!("listen once per connection and close the listen comm after its accept; {LENIENT}"),
    )
}

/// #13: `NCCL_DYNAMIC_CHUNK_SIZE` unset or 0 moves no data on TCPX (it hangs); refused at init.
pub fn dynamic_chunk_size(raw: Option<&str>) -> Result<(), NetError> {
    let zero = match raw.map(str::trim) {
        None => "unset",
        Some(v) if v.parse::<u64>() == Ok(0) => "0",
        Some(_) => return Ok(()),
    };
    Err(DYNAMIC_CHUNK_SIZE.refuse(
        NCCL_INVALID_USAGE,
        format!("NCCL_DYNAMIC_CHUNK_SIZE is {zero}: TCPX would move no data and hang"),
        format!("set NCCL_DYNAMIC_CHUNK_SIZE=524288 (GKE's value); {LENIENT} (chunk 524288)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_one_line_and_name_contract_source_and_fix() {
        let errs = [
            v7_size("isend", -1).unwrap_err(),
            cuda_recv_size(MAX_RECV + 1, 65536).unwrap_err(),
            cuda_registration(4097, 4096).unwrap_err(),
            cuda_registration(4096, 4095).unwrap_err(),
            irecv_n(2).unwrap_err(),
            iflush(),
            device_handle(true),
            device_handle(false),
            second_accept(),
            dynamic_chunk_size(None).unwrap_err(),
            dynamic_chunk_size(Some("0")).unwrap_err(),
        ];
        for e in errs {
            assert!(!e.msg.contains('\n'), "{}", e.msg);
            assert!(e.msg.starts_with("TCPX contract #"), "{}", e.msg);
            assert!(e.msg.contains("[TCPX: "), "{}", e.msg);
        }
        assert!(dynamic_chunk_size(None)
            .unwrap_err()
            .msg
            .contains("NCCL_DYNAMIC_CHUNK_SIZE=524288"));
        assert!(dynamic_chunk_size(Some("131072")).is_ok());
    }

    #[test]
    fn request_limit_follows_the_mtu() {
        assert_eq!(fragment_bytes(8244), 4096);
        assert_eq!(fragment_bytes(65536), 4096);
        assert_eq!(fragment_bytes(1460), 1408);
        assert_eq!(max_cuda_recv(8244), 4 << 20);
        assert_eq!(max_cuda_recv(1460), 2048 * 1408);
        assert!(cuda_recv_size(2048 * 1408, 1460).is_ok());
        let e = cuda_recv_size(2048 * 1408 + 1, 1460).unwrap_err();
        assert!(e.msg.contains("2883584") && e.msg.contains("MTU 1460"), "{}", e.msg);
        assert!(e.msg.starts_with(&FRAGMENTS_PER_RECV.tag()), "{}", e.msg);
    }

    #[test]
    fn cuda_registrations_must_be_whole_pages() {
        assert!(cuda_registration(8192, 4096 * 3).is_ok());
        assert!(cuda_registration(8192 + 16, 4096).is_err());
        assert!(cuda_registration(8192, 0).is_err());
        assert!(cuda_registration(8192, 5000).unwrap_err().msg.contains("8192"));
    }
}
