//! mlx5 direct verbs (devx) control path (reference §3): the pieces GPU-initiated RDMA is set up
//! with. Nothing here is on a data path; every call goes through unchanged and is observed after.
//!
//! - `mlx5dv_open_device`: passes through (starts the collector when a context opens).
//! - `mlx5dv_devx_alloc_uar` / `free_uar`: the UAR (reg_addr, base_addr, page_id) is handed to
//!   doorbell.rs, which recognises later `cuMemHostRegister` calls on it by address.
//! - `mlx5dv_devx_umem_reg` / `umem_reg_ex` / `umem_dereg`: umem id -> (address, size, GPU), the
//!   address of a dma-buf umem from the fd -> device range map of cuda.rs, GPU residency from the
//!   driver's pointer attributes.
//! - `mlx5dv_devx_obj_create` with CREATE_QP (decoded by [`sigmatop::decode::devx`]): a
//!   `DevxQp` endpoint (qpn from the output, service type, SQ size, UAR page, SQ base =
//!   wq umem address + wq_umem_offset + RQ bytes), handed to doorbell.rs for the doorbell join.
//! - `mlx5dv_devx_obj_modify` with a QP transition: endpoint state updates (remote QPN/GID at
//!   INIT2RTR, hashed with the local GID read from a real device context like a verbs QP's, so
//!   the correlator matches devx QPs across hosts by address rather than by QPN alone).
//!   `mlx5dv_devx_obj_destroy` of a QP: "destroyed", pending WQEs parsed first.

use core::ffi::{CStr, c_int, c_void};
use std::sync::Mutex;

use sigmatop::decode::devx::{
    CreateQpOut, DEVX_UAR_BYTES, DevxUar, QpCommand, QpState, QpcState, decode_command,
    decode_query_qp, st,
};
use sigmatop::decode::wqe::QpType;
use sigmatop::event::{EndpointDef, EndpointKind, LOCAL_ADDR_STATE, Layer, Peer};

use crate::interpose::dlsym::hook_table;
use crate::interpose::hook::{self, Guard};
use crate::layers::gpu::doorbell::{self, QpInfo};
use crate::runtime::dl::real_fns;

type Ptr = *mut c_void;
type Mailbox = unsafe extern "C" fn(Ptr, *const c_void, usize, *mut c_void, usize) -> Ptr;
type MailboxStatus = unsafe extern "C" fn(Ptr, *const c_void, usize, *mut c_void, usize) -> c_int;

const SONAMES: &[&CStr] = &[c"libmlx5.so.1", c"libmlx5.so"];

real_fns! { SONAMES;
    OPEN_DEVICE: unsafe extern "C" fn(Ptr, Ptr) -> Ptr = c"mlx5dv_open_device";
    ALLOC_UAR: unsafe extern "C" fn(Ptr, u32) -> Ptr = c"mlx5dv_devx_alloc_uar";
    FREE_UAR: unsafe extern "C" fn(Ptr) = c"mlx5dv_devx_free_uar";
    UMEM_REG: unsafe extern "C" fn(Ptr, Ptr, usize, u32) -> Ptr = c"mlx5dv_devx_umem_reg";
    UMEM_REG_EX: unsafe extern "C" fn(Ptr, *mut UmemIn) -> Ptr = c"mlx5dv_devx_umem_reg_ex";
    UMEM_DEREG: unsafe extern "C" fn(Ptr) -> c_int = c"mlx5dv_devx_umem_dereg";
    OBJ_CREATE: Mailbox = c"mlx5dv_devx_obj_create";
    OBJ_MODIFY: MailboxStatus = c"mlx5dv_devx_obj_modify";
    OBJ_DESTROY: unsafe extern "C" fn(Ptr) -> c_int = c"mlx5dv_devx_obj_destroy";
    OBJ_QUERY: MailboxStatus = c"mlx5dv_devx_obj_query";
}

/// `MLX5DV_UMEM_MASK_DMABUF` (mlx5dv.h).
const UMEM_MASK_DMABUF: u64 = 1;

/// `struct mlx5dv_devx_umem_in` (mlx5dv.h).
#[repr(C)]
pub struct UmemIn {
    addr: Ptr,
    size: usize,
    access: u32,
    pgsz_bitmap: u64,
    comp_mask: u64,
    dmabuf_fd: c_int,
}
const _: () = assert!(core::mem::offset_of!(UmemIn, comp_mask) == 32);
const _: () = assert!(core::mem::offset_of!(UmemIn, dmabuf_fd) == 40);

#[derive(Clone, Copy, Debug)]
struct Umem {
    handle: usize,
    id: u32,
    addr: u64,
    size: u64,
    /// The GPU whose memory it is (None: host memory).
    gpu: Option<u32>,
    /// Host memory registered with CUDA, a GPU can reach it (NVSHMEM's host-resident queues):
    /// the GPU of the registering thread's CUDA context.
    mapped_for: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Obj {
    handle: usize,
    qpn: u32,
    ep: u32,
    /// The devx context the QP was created on.
    ctx: usize,
    /// The state sigmatop last said of it (a modify command's target, or what the device
    /// answered a QUERY_QP of the program): a QUERY_QP that says otherwise is an update.
    said: Option<&'static str>,
}

static UMEMS: Mutex<Vec<Umem>> = Mutex::new(Vec::new());
static OBJS: Mutex<Vec<Obj>> = Mutex::new(Vec::new());

/// The devx tables' locks, for `fork::prepare` (leaves).
pub fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&OBJS);
    h.lock(&UMEMS);
}

/// The body of the hooks that observe a created object: the real call, then `note` with what it
/// returned, under the guard, when the mlx5 layer is on.
#[inline(always)]
fn observe<R: Copy>(call_real: impl FnOnce() -> R, note: impl FnOnce(R)) -> R {
    hook::around(Guard::AfterCall(Layer::Mlx5), call_real, |_, r| note(r))
}

/// The body of the hooks that destroy an object: sigmatop forgets it first (`forget`, panics
/// caught; not gated on the layer, so that nothing it still uses goes), then the real call.
#[inline(always)]
fn forget_first<R>(forget: impl FnOnce(), call_real: impl FnOnce() -> R) -> R {
    hook::guarded((), forget);
    call_real()
}

/// Hook of `mlx5dv_open_device`.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_open_device(device: Ptr, attr: Ptr) -> Ptr {
    let Some(real) = OPEN_DEVICE.get() else {
        return core::ptr::null_mut();
    };
    let ctx = observe(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(device, attr) },
        |ctx| {
            if !ctx.is_null() {
                crate::runtime::collector::ensure_started()
            }
        },
    );
    if !ctx.is_null() && !device.is_null() {
        // A real device's context: the verbs layer patches its ops table as for ibv_open_device
        // (an emulated devx context from a NULL device is not an ibv_context). Not gated on this
        // layer: the verbs layer decides.
        // SAFETY: a context libmlx5 just opened, not yet used by any other thread.
        unsafe { crate::layers::ibverbs::patch_context(ctx) };
        crate::layers::ibverbs::note_device(ctx, device);
    }
    ctx
}

/// Hook of `mlx5dv_devx_alloc_uar`.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_alloc_uar(ctx: Ptr, flags: u32) -> Ptr {
    let Some(real) = ALLOC_UAR.get() else {
        return core::ptr::null_mut();
    };
    observe(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ctx, flags) },
        |uar| {
            if uar.is_null() {
                return;
            }
            // SAFETY: a `struct mlx5dv_devx_uar` (40 bytes) returned by the library.
            let b = unsafe { core::slice::from_raw_parts(uar as *const u8, DEVX_UAR_BYTES) };
            if let Ok(u) = DevxUar::from_ne_bytes(b) {
                doorbell::add_uar(uar as u64, u);
            }
        },
    )
}

/// Hook of `mlx5dv_devx_free_uar`: the poller stops forwarding to the UAR before it goes.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_free_uar(uar: Ptr) {
    let Some(real) = FREE_UAR.get() else {
        return;
    };
    forget_first(
        || {
            if !uar.is_null() {
                doorbell::remove_uar(uar as u64)
            }
        },
        // SAFETY: the program's argument, unchanged.
        || unsafe { real(uar) },
    )
}

fn add_umem(handle: Ptr, addr: u64, size: u64, gpu: Option<u32>) {
    // SAFETY: `struct mlx5dv_devx_umem { uint32_t umem_id; }` returned by the library.
    let id = unsafe { *(handle as *const u32) };
    let gpu = gpu.or_else(|| crate::layers::gpu::driver::device_of(addr));
    let mapped_for = if gpu.is_none() && crate::layers::gpu::driver::is_mapped_host(addr) {
        crate::layers::gpu::driver::current_device()
    } else {
        None
    };
    if let Ok(mut m) = UMEMS.lock() {
        m.retain(|u| u.handle != handle as usize);
        m.push(Umem {
            handle: handle as usize,
            id,
            addr,
            size,
            gpu,
            mapped_for,
        });
    }
}

/// Hook of `mlx5dv_devx_umem_reg`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_umem_reg(ctx: Ptr, addr: Ptr, size: usize, access: u32) -> Ptr {
    let Some(real) = UMEM_REG.get() else {
        return core::ptr::null_mut();
    };
    observe(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ctx, addr, size, access) },
        |u| {
            if !u.is_null() {
                add_umem(u, addr as u64, size as u64, None)
            }
        },
    )
}

/// Hook of `mlx5dv_devx_umem_reg_ex` (dma-buf fd -> the device range it was exported from).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_umem_reg_ex(ctx: Ptr, umem_in: *mut UmemIn) -> Ptr {
    let Some(real) = UMEM_REG_EX.get() else {
        return core::ptr::null_mut();
    };
    observe(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ctx, umem_in) },
        |u| {
            if u.is_null() || umem_in.is_null() {
                return;
            }
            // SAFETY: the program's valid input struct.
            let i = unsafe { &*umem_in };
            if i.comp_mask & UMEM_MASK_DMABUF != 0 {
                // The fd names a range of GPU memory; addr (usually 0) is an offset in it.
                match crate::layers::gpu::cuda::dmabuf_range(i.dmabuf_fd) {
                    Some((dptr, _)) => {
                        let gpu = crate::layers::gpu::driver::device_of(dptr).or(Some(0));
                        add_umem(u, dptr + i.addr as u64, i.size as u64, gpu)
                    }
                    None => add_umem(u, 0, i.size as u64, None),
                }
            } else {
                add_umem(u, i.addr as u64, i.size as u64, None)
            }
        },
    )
}

/// Hook of `mlx5dv_devx_umem_dereg`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_umem_dereg(umem: Ptr) -> c_int {
    let Some(real) = UMEM_DEREG.get() else {
        return libc::EOPNOTSUPP;
    };
    forget_first(
        || {
            if !umem.is_null()
                && let Ok(mut m) = UMEMS.lock()
            {
                m.retain(|u| u.handle != umem as usize);
            }
        },
        // SAFETY: the program's argument, unchanged.
        || unsafe { real(umem) },
    )
}

fn umem_by_id(id: u32) -> Option<Umem> {
    UMEMS
        .lock()
        .ok()?
        .iter()
        .rev()
        .find(|u| u.id == id)
        .copied()
}

fn transport(st_: u8) -> &'static str {
    match st_ {
        st::RC => "RC",
        st::UC => "UC",
        st::UD => "UD",
        st::XRC => "XRC",
        st::DCI => "DCI",
        _ => "devx",
    }
}

/// A CREATE_QP went through: define the endpoint and hand the QP to the doorbell join.
fn on_create_qp(ctx: Ptr, obj: Ptr, inbox: &[u8], outbox: &[u8]) {
    let Ok(QpCommand::Create(c)) = decode_command(inbox) else {
        return;
    };
    let Ok(out) = CreateQpOut::decode(outbox) else {
        return;
    };
    if out.status != 0 {
        return;
    }
    crate::runtime::collector::ensure_started();
    let wq = if c.wq_umem_valid {
        umem_by_id(c.wq_umem_id)
    } else {
        None
    };
    // The SQ must lie inside its umem; otherwise the WQEs are not read (counted by the walk).
    let sq_addr = wq
        .filter(|u| c.sq_offset_in_umem().saturating_add(c.sq_bytes()) <= u.size)
        .map_or(0, |u| u.addr.saturating_add(c.sq_offset_in_umem()));
    // Where the work queue lives (CUDA copies or memcpy for its WQEs)...
    let gpu = wq.and_then(|u| u.gpu);
    // The doorbell record (8 bytes) inside its umem: the poller reads its send counter when
    // another QP's doorbell lands on a register this QP shares.
    let dbr = if c.dbr_umem_valid {
        umem_by_id(c.dbr_umem_id)
            .filter(|u| u.addr != 0 && c.dbr_addr.saturating_add(8) <= u.size)
            .map(|u| (u.addr.saturating_add(c.dbr_addr), u.gpu))
    } else {
        None
    };
    // ...and which GPU drives the QP: the queue's own GPU, or, for a queue in host memory
    // registered with CUDA (NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=hostmem), the GPU of the CUDA
    // context that registered it (or, failing that, of this thread's current context). A queue
    // in plain host memory (a CPU-driven devx QP) has no GPU.
    let drives = gpu.or_else(|| {
        wq.filter(|u| u.mapped_for.is_some() || crate::layers::gpu::driver::is_mapped_host(u.addr))
            .and_then(|u| {
                u.mapped_for
                    .or_else(crate::layers::gpu::driver::current_device)
            })
    });
    let ep = crate::runtime::registry::define_full(EndpointDef {
        id: 0,
        layer: Layer::Mlx5,
        kind: EndpointKind::DevxQp,
        label: format!("devx qp {:#x}", out.qpn),
        transport: transport(c.st).to_string(),
        peer: Peer::default(),
        qpn: Some(out.qpn),
        gpu: drives,
        created_ns: 0,
    });
    crate::runtime::registry::update(
        ep,
        &format!(
            "RESET sq={} uar_page={:#x} sq_addr={:#x}",
            c.sq_cnt(),
            c.uar_page,
            sq_addr
        ),
        None,
    );
    if let Ok(mut o) = OBJS.lock() {
        o.retain(|x| x.handle != obj as usize);
        o.push(Obj {
            handle: obj as usize,
            qpn: out.qpn,
            ep,
            ctx: ctx as usize,
            said: None,
        });
    }
    if sq_addr != 0 && c.sq_cnt() != 0 {
        doorbell::add_qp(QpInfo {
            qpn: out.qpn,
            ep,
            sq_addr,
            sq_cnt: c.sq_cnt(),
            qp_type: c.qp_type().unwrap_or(QpType::Rc),
            gpu,
            uar_page: c.uar_page,
            dbr: dbr.map_or(0, |(a, _)| a),
            dbr_gpu: dbr.and_then(|(_, g)| g),
        });
    }
}

/// Hook of `mlx5dv_devx_obj_create`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_obj_create(
    ctx: Ptr,
    inbox: *const c_void,
    inlen: usize,
    outbox: *mut c_void,
    outlen: usize,
) -> Ptr {
    let Some(real) = OBJ_CREATE.get() else {
        return core::ptr::null_mut();
    };
    observe(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ctx, inbox, inlen, outbox, outlen) },
        |obj| {
            if obj.is_null() || inbox.is_null() || outbox.is_null() {
                return;
            }
            // SAFETY: the mailboxes the program passed, with their lengths.
            let (i, o) = unsafe {
                (
                    core::slice::from_raw_parts(inbox as *const u8, inlen),
                    core::slice::from_raw_parts(outbox as *const u8, outlen),
                )
            };
            on_create_qp(ctx, obj, i, o);
        },
    )
}

fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Err => "ERR",
    }
}

/// Whether a QPC path addresses its peer by GID: the grh bit, or (RoCE, where the bit may be
/// left 0) a remote GID without a remote LID.
fn gid_routed(p: &sigmatop::decode::devx::QpcPath) -> bool {
    p.grh || (p.rlid == 0 && p.rgid != [0; 16])
}

/// Hook of `mlx5dv_devx_obj_modify`: QP state transitions.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_obj_modify(
    obj: Ptr,
    inbox: *const c_void,
    inlen: usize,
    outbox: *mut c_void,
    outlen: usize,
) -> c_int {
    let Some(real) = OBJ_MODIFY.get() else {
        return libc::EOPNOTSUPP;
    };
    // SAFETY: the program's arguments, unchanged.
    observe(
        || unsafe { real(obj, inbox, inlen, outbox, outlen) },
        |r| {
            if r != 0 || inbox.is_null() {
                return;
            }
            // SAFETY: the program's mailbox and its length.
            let i = unsafe { core::slice::from_raw_parts(inbox as *const u8, inlen) };
            let Ok(QpCommand::Modify(m)) = decode_command(i) else {
                return;
            };
            let target = state_name(m.transition.target_state());
            let found = OBJS.lock().ok().and_then(|mut o| {
                o.iter_mut()
                    .find(|x| x.handle == obj as usize || x.qpn == m.qpn)
                    .map(|x| {
                        x.said = Some(target);
                        (x.ep, x.ctx, x.qpn)
                    })
            });
            let Some((ep, ctx, qpn)) = found else { return };
            let peer = m.path.filter(|p| p.remote_qpn != 0).map(|p| {
                // As for verbs QPs: (remote address, remote QPN) hashed into the peer address,
                // and (local address, QPN) into this process's own addresses, when the context
                // is a real device whose GID table can be read. The path is GID-routed when the
                // grh bit is set, and also when it is clear with a GID and no LID: a RoCE port
                // routes by rgid_rip whatever the bit says (NVSHMEM 3.4.5's INIT2RTR leaves it
                // 0), and LID 0 is no InfiniBand destination. Otherwise (InfiniBand without a
                // GRH) the LID stands in for the GID, on both sides.
                use crate::layers::ibverbs::{device_gid, device_lid, lid_as_gid, qp_addr_hash};
                let by_gid = gid_routed(&p);
                let (remote, own) = if by_gid {
                    (p.rgid, device_gid(ctx, p.port.max(1), p.src_addr_index))
                } else {
                    (
                        lid_as_gid(p.rlid),
                        device_lid(ctx, p.port.max(1)).map(lid_as_gid),
                    )
                };
                if let Some(l) = own {
                    crate::runtime::registry::add_own_addr(qp_addr_hash(&l, qpn));
                    crate::runtime::registry::update(
                        ep,
                        LOCAL_ADDR_STATE,
                        Some(crate::layers::ibverbs::local_addr(&l, qpn)),
                    );
                }
                Peer {
                    addr_hash: qp_addr_hash(&remote, p.remote_qpn),
                    text: format!(
                        "qpn {:#x} {}",
                        p.remote_qpn,
                        sigmatop::event::port_addr_text(&remote)
                    ),
                    qpn: Some(p.remote_qpn),
                    gid: (remote != [0; 16]).then_some(remote),
                }
            });
            crate::runtime::registry::update(ep, target, peer);
        },
    )
}

/// Hook of `mlx5dv_devx_obj_query`: a program's QUERY_QP of a devx QP (NCCL 2.28's GIN error
/// query through DOCA GPUNetIO, every `NCCL_GIN_ERROR_QUERY_SEC`) tells sigmatop the state the
/// device holds the QP in. A change is an endpoint update (`ERR`: the QP failed, which no CQE
/// sigmatop sees says for a GPU-polled queue). sigmatop never queries on its own.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_obj_query(
    obj: Ptr,
    inbox: *const c_void,
    inlen: usize,
    outbox: *mut c_void,
    outlen: usize,
) -> c_int {
    let Some(real) = OBJ_QUERY.get() else {
        return libc::EOPNOTSUPP;
    };
    // SAFETY: the program's arguments, unchanged.
    observe(
        || unsafe { real(obj, inbox, inlen, outbox, outlen) },
        |r| {
            if r != 0 || inbox.is_null() || outbox.is_null() {
                return;
            }
            // SAFETY: the program's mailboxes and their lengths; the call has returned.
            let (i, o) = unsafe {
                (
                    core::slice::from_raw_parts(inbox as *const u8, inlen),
                    core::slice::from_raw_parts(outbox as *const u8, outlen),
                )
            };
            let Ok(Some((_, state))) = decode_query_qp(i, o) else {
                return;
            };
            // A failure the program did not ask for (no 2ERR of its own) is the NIC's: said so.
            let name = match state {
                QpcState::Error => "ERR by the NIC",
                QpcState::SqError => "SQE by the NIC",
                s => s.name(),
            };
            let changed = OBJS.lock().ok().and_then(|mut objs| {
                let x = objs.iter_mut().find(|x| x.handle == obj as usize)?;
                // The program's own 2ERR already said ERR: the device agreeing is no news.
                let same = x.said == Some(name) || (x.said == Some("ERR") && state.failed());
                (!same).then(|| {
                    x.said = Some(name);
                    x.ep
                })
            });
            if let Some(ep) = changed {
                crate::runtime::registry::update(ep, name, None);
            }
        },
    )
}

/// Hook of `mlx5dv_devx_obj_destroy`: a QP's pending WQEs are parsed before its SQ can go.
#[unsafe(no_mangle)]
unsafe extern "C" fn mlx5dv_devx_obj_destroy(obj: Ptr) -> c_int {
    let Some(real) = OBJ_DESTROY.get() else {
        return libc::EOPNOTSUPP;
    };
    let forget = || {
        let found = OBJS.lock().ok().and_then(|mut o| {
            let i = o.iter().position(|x| x.handle == obj as usize)?;
            Some(o.remove(i))
        });
        if let Some(x) = found {
            doorbell::remove_qp(x.qpn);
            crate::runtime::registry::update(x.ep, "destroyed", None);
        }
    };
    // SAFETY: the program's argument, unchanged.
    forget_first(forget, || unsafe { real(obj) })
}

/// Hooks the dlsym wrappers hand out (DOCA opens libmlx5 with dlopen + dlsym).
pub fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Mlx5;
        mlx5dv_open_device => OPEN_DEVICE,
        mlx5dv_devx_alloc_uar => ALLOC_UAR,
        mlx5dv_devx_free_uar => FREE_UAR,
        mlx5dv_devx_umem_reg => UMEM_REG,
        mlx5dv_devx_umem_reg_ex => UMEM_REG_EX,
        mlx5dv_devx_umem_dereg => UMEM_DEREG,
        mlx5dv_devx_obj_create => OBJ_CREATE,
        mlx5dv_devx_obj_modify => OBJ_MODIFY,
        mlx5dv_devx_obj_destroy => OBJ_DESTROY,
        mlx5dv_devx_obj_query => OBJ_QUERY,
    ]
}
