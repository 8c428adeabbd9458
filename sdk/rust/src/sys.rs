//! The host functions of module `zeroeng` (docs/wasm-program-abi.md), exactly the ABI's
//! signatures: every parameter is an `i32` (pointers are offsets into the program's memory,
//! which is what a pointer is on wasm32) and every function returns an `i32` status.
//!
//! The rest of the SDK wraps them; a program may call them directly (they are `unsafe`: the
//! pointers must be valid for the lengths given). Functions of ABI 1.1 (callbacks and
//! handle-only calls) are marked so: a host of ABI 1.0 refuses a module that imports them, and
//! the SDK's [`zeroeng_callback`](crate::zeroeng_callback) export imports `frame_args`,
//! `frame_return` and `error_set`, so every program built with this SDK needs a 1.1 host.
//!
//! On a target other than wasm32 (the SDK's own unit tests, `cargo doc`) there is no host:
//! every function fails with `ERR_INVALID`, and `error_message` says why.

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "zeroeng")]
extern "C" {
    /// Writes the ABI's major and minor versions, two u32.
    pub fn abi_info(out: *mut u32) -> i32;
    /// The pending failure's message (UTF-8, at most `cap` bytes) and its whole length.
    pub fn error_message(buf: *mut u8, cap: i32, len_out: *mut u32) -> i32;
    /// Clears the pending failure: the program has handled it.
    pub fn error_clear() -> i32;
    /// Calls the API function at a dotted path with a JSON array of arguments; its JSON result
    /// goes to `out` (`ERR_SIZE` when it does not fit: `result_read` takes it).
    pub fn call(
        path: *const u8,
        path_len: i32,
        args: *const u8,
        args_len: i32,
        out: *mut u8,
        out_cap: i32,
        len_out: *mut u32,
    ) -> i32;
    /// Calls method `name` of handle `h`'s value, as `call` does.
    pub fn call_method(
        h: i32,
        name: *const u8,
        name_len: i32,
        args: *const u8,
        args_len: i32,
        out: *mut u8,
        out_cap: i32,
        len_out: *mut u32,
    ) -> i32;
    /// Reads property `name` of handle `h`'s value as JSON.
    pub fn get(h: i32, name: *const u8, name_len: i32, out: *mut u8, out_cap: i32, len_out: *mut u32) -> i32;
    /// Writes property `name` of handle `h`'s value from JSON.
    pub fn set(h: i32, name: *const u8, name_len: i32, value: *const u8, value_len: i32) -> i32;
    /// The result that did not fit the last call's buffer.
    pub fn result_read(out: *mut u8, cap: i32) -> i32;
    /// Gives handle `h` back.
    pub fn release(h: i32) -> i32;
    /// Opens a scope (`tensor.scope`) and writes its id.
    pub fn scope_open(id_out: *mut u32) -> i32;
    /// Closes the innermost scope but for the tensors of the `n` handles at `keep`.
    pub fn scope_close(id: i32, keep: *const u32, n: i32) -> i32;
    /// Turns autograd's recording on or off, writing whether it was on (u32).
    pub fn grad_enabled(on: i32, prev_out: *mut u32) -> i32;
    /// A tensor of `dtype` and shape (`ndim` i64 at `shape`) from `nbytes` at `data`.
    pub fn tensor_from_bytes(
        dtype: i32,
        shape: *const i64,
        ndim: i32,
        data: *const u8,
        nbytes: i32,
        h_out: *mut u32,
    ) -> i32;
    /// The tensor's bytes (row-major, its dtype) and their length.
    pub fn tensor_data(h: i32, buf: *mut u8, cap: i32, len_out: *mut u32) -> i32;
    /// Writes u32 dtype, u32 ndim, then ndim i64 dimensions (at most 136 bytes).
    pub fn tensor_shape(h: i32, out: *mut u8) -> i32;

    /// ABI 1.1: a function value that calls the program's `zeroeng_callback(id, frame)`.
    pub fn function_new(id: i32, h_out: *mut u32) -> i32;
    /// ABI 1.1: the running callback's arguments as a JSON array (buffer rules as `call`'s).
    pub fn frame_args(frame: i32, out: *mut u8, cap: i32, len_out: *mut u32) -> i32;
    /// ABI 1.1: the running callback's return value, as JSON.
    pub fn frame_return(frame: i32, value: *const u8, value_len: i32) -> i32;
    /// ABI 1.1: records the program's own failure, pending.
    pub fn error_set(msg: *const u8, msg_len: i32) -> i32;
    /// ABI 1.1: the API's value at a dotted path as a new handle.
    pub fn lookup(path: *const u8, path_len: i32, h_out: *mut u32) -> i32;
    /// ABI 1.1: calls function handle `f` with `n` 16-byte argument records at `args`.
    pub fn invoke(f: i32, args: *const u8, n: i32, out: *mut u32) -> i32;
    /// ABI 1.1: calls method `name` of handle `h`'s value with `n` argument records.
    pub fn invoke_method(h: i32, name: *const u8, name_len: i32, args: *const u8, n: i32, out: *mut u32) -> i32;
    /// Gives handle `h` back without releasing its tensor (1.1).
    pub fn forget(h: i32) -> i32;
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

/// No host outside WebAssembly: every call fails, saying so.
#[cfg(not(target_arch = "wasm32"))]
#[allow(clippy::missing_safety_doc, clippy::too_many_arguments)]
mod native {
    const NO_HOST: &[u8] = b"zeroeng: no host: the host functions exist only in a program run by zeroeng (target wasm32-wasi)";
    const ERR_INVALID: i32 = 1;

    /// Writes NO_HOST as the pending failure's message.
    pub unsafe fn error_message(buf: *mut u8, cap: i32, len_out: *mut u32) -> i32 {
        let n = NO_HOST.len().min(cap.max(0) as usize);
        std::ptr::copy_nonoverlapping(NO_HOST.as_ptr(), buf, n);
        *len_out = NO_HOST.len() as u32;
        0
    }
    /// Nothing to clear.
    pub unsafe fn error_clear() -> i32 {
        0
    }
    /// Writes version 0.0: no host.
    pub unsafe fn abi_info(out: *mut u32) -> i32 {
        *out = 0;
        *out.add(1) = 0;
        ERR_INVALID
    }

    macro_rules! no_host {
        ($($name:ident($($p:ident: $t:ty),*);)*) => {$(
            /// Fails: no host.
            pub unsafe fn $name($(_: $t),*) -> i32 {
                ERR_INVALID
            }
        )*};
    }
    no_host! {
        call(path: *const u8, path_len: i32, args: *const u8, args_len: i32, out: *mut u8, out_cap: i32, len_out: *mut u32);
        call_method(h: i32, name: *const u8, name_len: i32, args: *const u8, args_len: i32, out: *mut u8, out_cap: i32, len_out: *mut u32);
        get(h: i32, name: *const u8, name_len: i32, out: *mut u8, out_cap: i32, len_out: *mut u32);
        set(h: i32, name: *const u8, name_len: i32, value: *const u8, value_len: i32);
        result_read(out: *mut u8, cap: i32);
        release(h: i32);
        scope_open(id_out: *mut u32);
        scope_close(id: i32, keep: *const u32, n: i32);
        grad_enabled(on: i32, prev_out: *mut u32);
        tensor_from_bytes(dtype: i32, shape: *const i64, ndim: i32, data: *const u8, nbytes: i32, h_out: *mut u32);
        tensor_data(h: i32, buf: *mut u8, cap: i32, len_out: *mut u32);
        tensor_shape(h: i32, out: *mut u8);
        function_new(id: i32, h_out: *mut u32);
        frame_args(frame: i32, out: *mut u8, cap: i32, len_out: *mut u32);
        frame_return(frame: i32, value: *const u8, value_len: i32);
        error_set(msg: *const u8, msg_len: i32);
        lookup(path: *const u8, path_len: i32, h_out: *mut u32);
        invoke(f: i32, args: *const u8, n: i32, out: *mut u32);
        invoke_method(h: i32, name: *const u8, name_len: i32, args: *const u8, n: i32, out: *mut u32);
        forget(h: i32);
    }
}
