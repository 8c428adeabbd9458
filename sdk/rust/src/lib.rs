//! `zeroeng`: the Rust SDK of zeroeng's WebAssembly training programs
//! (docs/wasm-program-abi.md). A program built with it for `wasm32-wasi` trains through the
//! very API scripts reach with `require("zeroeng")`, by name:
//!
//! ```ignore
//! use zeroeng::{args, call_tensor, call_object, dict, Arg, Result};
//!
//! fn train() -> Result<()> {
//!     let model = call_object("nn.Linear", &args![784, 10])?;
//!     let opt = call_object("optim.Adam", &args![model.method("parameters", &[])?, dict! { "lr" => 1e-3 }])?;
//!     let x = call_tensor("tensor.randn", &args![32, 784])?;
//!     let logits = model.op("forward", &[Arg::from(&x)])?;        // a handle-only call
//!     let loss = logits.op("mean", &[])?;
//!     loss.op_unit("backward", &[])?;
//!     opt.op_unit("step", &[])?;
//!     println!("loss {}", loss.item()?);
//!     Ok(())
//! }
//! ```
//!
//! * Every call returns [`Result`]: a failed host call is an [`Error`] carrying the host's
//!   message (the failure is cleared on the host, so the program may go on).
//! * Handles are RAII: a [`Tensor`] or [`Object`] the program got from a call is released
//!   when dropped (a tensor the program made goes back to the memory pool; a parameter, a
//!   gradient or another value is only forgotten). [`Tensor::into_raw`] and
//!   [`Value::forget`] give one up without releasing it. Two handles may stand for one
//!   tensor (a method that returns its receiver): see [`Tensor`].
//! * Calls come in two forms: JSON ones ([`call`], [`Tensor::method`], [`Object::get`],
//!   [`Object::set`]) take [`Value`]s (numbers, strings, arrays, [`dict!`]s and handles) and
//!   return a [`Value`]; handle-only ones ([`Tensor::op`], [`Object::invoke`], [`lookup`];
//!   ABI 1.1) take handles and numbers ([`Arg`]) and return a handle, with no JSON on either
//!   side: the per-op calls of a training step.
//! * [`scope`] releases the tensors made inside it but those its closure returns;
//!   [`no_grad`] runs a closure with autograd off.
//! * [`Function::new`] makes a Rust closure a function value of the API (ABI 1.1): a
//!   module's `forward`, `zero.init`'s builder, a `noSync` body, an `amp.autocast` region.
//!
//! Build (Debian's rustc with its wasm32 standard library, packages `rustc` and
//! `libstd-rust-dev-wasm32`; no other crate):
//!
//! ```text
//! rustc --edition 2021 --crate-type rlib --crate-name zeroeng --target wasm32-wasi -O \
//!     -o build/libzeroeng.rlib sdk/rust/src/lib.rs
//! rustc --edition 2021 --target wasm32-wasi -O --extern zeroeng=build/libzeroeng.rlib \
//!     -o train.wasm train.rs
//! zeroeng run train.wasm -- --its-arguments
//! ```
//!
//! or `cargo build --target wasm32-wasi` with this crate as a path dependency. The crate
//! brings the ABI's marker export (`zeroeng_program_abi_v1`) and the callback dispatcher
//! (`zeroeng_callback`). The SDK is single-threaded, as WASI programs are.

#![warn(missing_docs)]

use std::cell::Cell;
use std::fmt;

mod callback;
mod json;
pub mod sys;

pub use callback::{zeroeng_callback, Function};
pub use json::{number_string, to_fixed, Value};

/// The marker export that declares the ABI's major version; never called.
#[no_mangle]
pub extern "C" fn zeroeng_program_abi_v1() {}

/// A host function's status (docs/wasm-program-abi.md, "Conventions"), or
/// [`Status::PROGRAM`] for an error of the program's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status(pub i32);

impl Status {
    /// Success.
    pub const OK: Status = Status(0);
    /// A bad argument: JSON that does not parse, a name not in the API.
    pub const ERR_INVALID: Status = Status(1);
    /// A handle the program does not hold, or of another kind.
    pub const ERR_HANDLE: Status = Status(2);
    /// A pointer and length outside the program's memory.
    pub const ERR_BOUNDS: Status = Status(3);
    /// A dtype code the ABI does not define.
    pub const ERR_DTYPE: Status = Status(4);
    /// A buffer too small (not a failure for results: the SDK reads them whole), a shape too large.
    pub const ERR_SIZE: Status = Status(5);
    /// The device's memory is exhausted.
    pub const ERR_NOMEM: Status = Status(7);
    /// The API function raised an error.
    pub const ERR_CALL: Status = Status(8);
    /// The program holds 2^20 handles.
    pub const ERR_LIMIT: Status = Status(9);
    /// Not a host status: an error the program (or the SDK) made, [`Error::new`].
    pub const PROGRAM: Status = Status(-1);

    /// The status's name in the ABI (`"ERR_CALL"`).
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "OK",
            1 => "ERR_INVALID",
            2 => "ERR_HANDLE",
            3 => "ERR_BOUNDS",
            4 => "ERR_DTYPE",
            5 => "ERR_SIZE",
            6 => "ERR_COMM",
            7 => "ERR_NOMEM",
            8 => "ERR_CALL",
            9 => "ERR_LIMIT",
            -1 => "PROGRAM",
            _ => "status",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            "status" => write!(f, "status {}", self.0),
            name => f.write_str(name),
        }
    }
}

/// A failure: a host call's status and the host's message, or the program's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error of the program's own (status [`Status::PROGRAM`]): returned from a
    /// [`Function`]'s closure, it is what the API call that called the function throws.
    pub fn new(message: impl Into<String>) -> Error {
        Error { status: Status::PROGRAM, message: message.into() }
    }

    /// The host call's status ([`Status::PROGRAM`] for the program's own errors).
    pub fn status(&self) -> Status {
        self.status
    }

    /// The message: the host's, naming the call and what failed.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::new(e.to_string())
    }
}

/// The SDK's result: every call's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns a status into the failure it reports, with the host's message, and clears the
/// failure on the host so that the program may go on.
pub(crate) fn fail(st: i32) -> Error {
    let mut buf = vec![0u8; 512];
    let mut n: u32 = 0;
    unsafe {
        sys::error_message(buf.as_mut_ptr(), buf.len() as i32, &mut n);
        if n as usize > buf.len() {
            buf.resize(n as usize, 0);
            sys::error_message(buf.as_mut_ptr(), buf.len() as i32, &mut n);
        }
        sys::error_clear();
    }
    buf.truncate((n as usize).min(buf.len()));
    let mut message = String::from_utf8_lossy(&buf).into_owned();
    if message.is_empty() {
        message = format!("zeroeng: a host call failed with {} and no message", Status(st));
    }
    Error { status: Status(st), message }
}

/// `Ok(())` for a status of 0, the failure otherwise.
pub(crate) fn check(st: i32) -> Result<()> {
    if st == 0 {
        Ok(())
    } else {
        Err(fail(st))
    }
}

/// The host's ABI major and minor versions (1.1 for the callbacks and handle-only calls).
pub fn abi_version() -> (u32, u32) {
    let mut v = [0u32; 2];
    unsafe { sys::abi_info(v.as_mut_ptr()) };
    (v[0], v[1])
}

// ---- Results through the ABI's buffers ------------------------------------------------------

thread_local! {
    /// The buffer results come into, taken out while a call runs (a callback's calls inside
    /// it use buffers of their own).
    static BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Runs a host call that writes a result (call, call_method, get, frame_args) into a buffer,
/// reading a result too large for it with result_read, and parses it; `owned` says whether
/// the handles in it are the program's to release.
pub(crate) fn read_result(owned: bool, f: impl FnOnce(*mut u8, i32, *mut u32) -> i32) -> Result<Value> {
    let mut buf = BUFFER.with(|b| b.take());
    if buf.capacity() < 4096 {
        buf = Vec::with_capacity(4096);
    }
    buf.clear();
    let mut n: u32 = 0;
    let mut st = f(buf.as_mut_ptr(), buf.capacity() as i32, &mut n);
    if st == Status::ERR_SIZE.0 {
        buf.reserve(n as usize);
        st = unsafe { sys::result_read(buf.as_mut_ptr(), buf.capacity() as i32) };
    }
    let result = if st != 0 {
        Err(fail(st))
    } else {
        // The host wrote n bytes (at most the capacity: it checks).
        unsafe { buf.set_len((n as usize).min(buf.capacity())) };
        json::parse(&buf, owned)
    };
    BUFFER.with(|b| b.set(buf));
    result
}

fn json_args(args: &[Value]) -> String {
    if args.is_empty() {
        return String::new();
    }
    let mut s = String::with_capacity(64);
    s.push('[');
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        a.write_json(&mut s);
    }
    s.push(']');
    s
}

// ---- Calls by path --------------------------------------------------------------------------

/// Calls the API function at a dotted path of `require("zeroeng")` (`"tensor.randn"`,
/// `"nn.functional.crossEntropy"`; `"new nn.Linear"` constructs) with JSON
/// arguments, and returns its result. A path to a value that is not a function, with no
/// arguments, reads it (`call("dist.rank", &[])`).
pub fn call(path: &str, args: &[Value]) -> Result<Value> {
    let a = json_args(args);
    read_result(true, |out, cap, n| unsafe {
        sys::call(path.as_ptr(), path.len() as i32, a.as_ptr(), a.len() as i32, out, cap, n)
    })
}

/// [`call`] for a result that must be a tensor.
pub fn call_tensor(path: &str, args: &[Value]) -> Result<Tensor> {
    call(path, args)?.into_tensor().map_err(|e| Error::new(format!("{}: {}", path, e)))
}

/// [`call`] for a result that must be an object (a module, an optimizer, a function).
pub fn call_object(path: &str, args: &[Value]) -> Result<Object> {
    call(path, args)?.into_object().map_err(|e| Error::new(format!("{}: {}", path, e)))
}

/// [`call`] for a result that must be a number (`call_f64("dist.worldSize", &[])`).
pub fn call_f64(path: &str, args: &[Value]) -> Result<f64> {
    call(path, args)?.to_f64().map_err(|e| Error::new(format!("{}: {}", path, e)))
}

/// The API's value at a dotted path as a handle (ABI 1.1): a function
/// (`lookup("nn.functional.relu")`), to [`invoke`](Object::invoke) without JSON, or an object.
pub fn lookup(path: &str) -> Result<Object> {
    let mut h: u32 = 0;
    check(unsafe { sys::lookup(path.as_ptr(), path.len() as i32, &mut h) })?;
    Ok(Object::with(h, Kind::Function, true))
}

// ---- Handles --------------------------------------------------------------------------------

/// The ABI's dtype codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// float32, code 0.
    Float32 = 0,
    /// float16, code 1.
    Float16 = 1,
    /// bfloat16, code 2.
    BFloat16 = 2,
    /// int64, code 3.
    Int64 = 3,
    /// float64, code 4.
    Float64 = 4,
    /// int32, code 5.
    Int32 = 5,
    /// uint8, code 6.
    Uint8 = 6,
    /// bool, code 7.
    Bool = 7,
}

impl DType {
    /// The dtype of an ABI code.
    pub fn from_code(code: u32) -> Option<DType> {
        use DType::*;
        [Float32, Float16, BFloat16, Int64, Float64, Int32, Uint8, Bool].get(code as usize).copied()
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Float32 | DType::Int32 => 4,
            DType::Float16 | DType::BFloat16 => 2,
            DType::Int64 | DType::Float64 => 8,
            DType::Uint8 | DType::Bool => 1,
        }
    }

    /// The API's name (`"float32"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Float32 => "float32",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Int64 => "int64",
            DType::Float64 => "float64",
            DType::Int32 => "int32",
            DType::Uint8 => "uint8",
            DType::Bool => "bool",
        }
    }
}

/// What a non-tensor handle stands for, as far as the SDK knows (results say; a handle from
/// [`lookup`] or [`Function::new`] is taken for a function).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A value of the API that is not a function: a module, an optimizer, a data loader.
    Object,
    /// A function.
    Function,
}

impl Kind {
    /// `"object"` or `"function"`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Object => "object",
            Kind::Function => "function",
        }
    }
}

/// A handle on a tensor. Dropping it gives the handle back and leaves the tensor to the
/// scripts' lifetime rules — its scope ([`scope`]), its generation, what autograd needs —
/// as a script's variable going out of scope does: the tensor may be the API's too (a
/// module's buffer, a dataset's data, the receiver an in-place method or `keep()` returns).
/// [`release`](Tensor::release) gives its memory back at once, as `t.release()` does in a
/// script (a parameter, a gradient or optimizer state is the engine's and is only
/// forgotten). A `Tensor` that only names a handle (from [`Value::from`]`(&t)`, a callback's
/// arguments) gives back nothing.
#[derive(Debug)]
pub struct Tensor {
    h: u32,
    owned: bool,
}

/// A handle on another value of the API: a module, an optimizer, a scheduler, a data loader,
/// a function. Dropping it gives the handle back (the value itself lives on as the API keeps
/// it).
#[derive(Debug)]
pub struct Object {
    h: u32,
    kind: Kind,
    owned: bool,
}

impl Drop for Tensor {
    fn drop(&mut self) {
        if self.owned {
            forget_quietly(self.h);
        }
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        if self.owned {
            forget_quietly(self.h);
        }
    }
}

/// Gives h back, clearing a failure (a handle the host no longer has): a destructor reports
/// nothing, and a failure left pending would end the program at its next call.
fn forget_quietly(h: u32) {
    unsafe {
        if sys::forget(h as i32) != 0 {
            sys::error_clear();
        }
    }
}

/// One argument of a handle-only call ([`Tensor::op`], [`Object::invoke`]): a handle, a
/// number or `undefined`. `Arg::from(&t)`, `Arg::from(2)` and `(&t).into()` make them.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A tensor.
    T(&'a Tensor),
    /// Another value (a module, a function).
    O(&'a Object),
    /// A number.
    N(f64),
    /// JavaScript's `undefined` (an argument left out).
    Undefined,
}

impl<'a> From<&'a Tensor> for Arg<'a> {
    fn from(t: &'a Tensor) -> Arg<'a> {
        Arg::T(t)
    }
}

impl<'a> From<&'a Object> for Arg<'a> {
    fn from(o: &'a Object) -> Arg<'a> {
        Arg::O(o)
    }
}

impl<'a> From<&'a Function> for Arg<'a> {
    fn from(f: &'a Function) -> Arg<'a> {
        Arg::O(f.object())
    }
}

macro_rules! arg_number {
    ($($t:ty),*) => {$(
        impl<'a> From<$t> for Arg<'a> {
            fn from(x: $t) -> Arg<'a> {
                Arg::N(x as f64)
            }
        }
    )*};
}
arg_number!(f64, f32, i32, i64, u32, u64, isize, usize);

/// The 16-byte records of handle-only calls: u32 tag (0 a handle, 1 a number, 2 undefined),
/// u32 handle, f64 number.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Record {
    tag: u32,
    handle: u32,
    number: f64,
}

/// At most this many arguments go to a handle-only call.
pub const MAX_OP_ARGS: usize = 64;

fn records(args: &[Arg]) -> Result<Vec<Record>> {
    if args.len() > MAX_OP_ARGS {
        return Err(Error::new(format!("zeroeng: {} arguments to a handle-only call, at most {}", args.len(), MAX_OP_ARGS)));
    }
    Ok(args
        .iter()
        .map(|a| match a {
            Arg::T(t) => Record { tag: 0, handle: t.h, number: 0.0 },
            Arg::O(o) => Record { tag: 0, handle: o.h, number: 0.0 },
            Arg::N(x) => Record { tag: 1, handle: 0, number: *x },
            Arg::Undefined => Record { tag: 2, handle: 0, number: 0.0 },
        })
        .collect())
}

/// The handle a handle-only call wrote: 0 (undefined or null) is an error for a call that
/// must return one.
fn returned(what: &str, name: &str, h: u32) -> Result<u32> {
    if h == 0 {
        Err(Error::new(format!("zeroeng: {}.{} returned undefined, not a handle", what, name)))
    } else {
        Ok(h)
    }
}

/// The calls every handle takes: JSON ones (method, get, set) and handle-only ones (op).
macro_rules! handle_methods {
    ($what:literal) => {
        /// The handle's number.
        pub fn raw(&self) -> u32 {
            self.h
        }

        /// Gives the handle up without releasing it, returning its number: the host keeps it
        /// until it is released by number ([`sys::release`]) or the program ends.
        pub fn into_raw(self) -> u32 {
            let h = self.h;
            std::mem::forget(self);
            h
        }

        /// Releases the handle now, reporting a failure: a tensor the program made goes back
        /// to the memory pool at once, as `t.release()` does (dropping the handle only gives
        /// the handle back).
        pub fn release(self) -> Result<()> {
            let (h, owned) = (self.h, self.owned);
            std::mem::forget(self);
            if owned {
                check(unsafe { sys::release(h as i32) })
            } else {
                Ok(())
            }
        }

        /// Whether dropping this gives the handle back (false for one that only names it).
        pub fn is_owned(&self) -> bool {
            self.owned
        }

        /// Calls method `name` with JSON arguments and returns its result
        /// (`model.method("parameters", &[])`).
        pub fn method(&self, name: &str, args: &[Value]) -> Result<Value> {
            let a = json_args(args);
            read_result(true, |out, cap, n| unsafe {
                sys::call_method(self.h as i32, name.as_ptr(), name.len() as i32, a.as_ptr(), a.len() as i32, out, cap, n)
            })
        }

        /// [`method`](Self::method) for a result that must be a tensor.
        pub fn method_tensor(&self, name: &str, args: &[Value]) -> Result<Tensor> {
            self.method(name, args)?.into_tensor().map_err(|e| Error::new(format!("{}.{}: {}", $what, name, e)))
        }

        /// [`method`](Self::method) for a result that must be an object.
        pub fn method_object(&self, name: &str, args: &[Value]) -> Result<Object> {
            self.method(name, args)?.into_object().map_err(|e| Error::new(format!("{}.{}: {}", $what, name, e)))
        }

        /// [`method`](Self::method) for a result that must be a number.
        pub fn method_f64(&self, name: &str, args: &[Value]) -> Result<f64> {
            self.method(name, args)?.to_f64().map_err(|e| Error::new(format!("{}.{}: {}", $what, name, e)))
        }

        /// Reads property `name` (`"shape"`, `"grad"`, `"paramGroups"`) as JSON.
        pub fn get(&self, name: &str) -> Result<Value> {
            read_result(true, |out, cap, n| unsafe {
                sys::get(self.h as i32, name.as_ptr(), name.len() as i32, out, cap, n)
            })
        }

        /// Writes property `name` (a module's `"forward"`, a loader's `"position"`).
        pub fn set(&self, name: &str, value: &Value) -> Result<()> {
            let v = value.to_json();
            check(unsafe { sys::set(self.h as i32, name.as_ptr(), name.len() as i32, v.as_ptr(), v.len() as i32) })
        }

        /// Calls method `name` with handles and numbers, no JSON (ABI 1.1), for a tensor
        /// result: `x.op("add", &[Arg::from(&y)])`, `model.op("forward", &[(&x).into()])`.
        /// A method that returns data (a number, an array) is an error: use
        /// [`method`](Self::method).
        pub fn op(&self, name: &str, args: &[Arg]) -> Result<Tensor> {
            Ok(Tensor::with(returned($what, name, self.invoke_method(name, args)?)?, true))
        }

        /// [`op`](Self::op) for a result that is another value (a module, an optimizer).
        pub fn op_object(&self, name: &str, args: &[Arg]) -> Result<Object> {
            Ok(Object::with(returned($what, name, self.invoke_method(name, args)?)?, Kind::Object, true))
        }

        /// [`op`](Self::op) for a method whose result is not wanted (`"backward"`, `"step"`,
        /// `"zeroGrad"`, an in-place `"mul_"`): a handle it returns is given back at once (the
        /// tensor, maybe the receiver's own, is left alone).
        pub fn op_unit(&self, name: &str, args: &[Arg]) -> Result<()> {
            let h = self.invoke_method(name, args)?;
            if h != 0 {
                forget_quietly(h);
            }
            Ok(())
        }

        fn invoke_method(&self, name: &str, args: &[Arg]) -> Result<u32> {
            let r = records(args)?;
            let mut out: u32 = 0;
            check(unsafe {
                sys::invoke_method(self.h as i32, name.as_ptr(), name.len() as i32, r.as_ptr() as *const u8, r.len() as i32, &mut out)
            })?;
            Ok(out)
        }
    };
}

impl Tensor {
    handle_methods!("tensor");

    pub(crate) fn with(h: u32, owned: bool) -> Tensor {
        Tensor { h, owned }
    }

    /// Takes over handle `h` (a number from [`into_raw`](Self::into_raw) or the raw
    /// [`sys`] functions): dropping the `Tensor` releases it.
    pub fn from_raw(h: u32) -> Tensor {
        Tensor { h, owned: true }
    }

    /// A second `Tensor` naming the same handle without owning it: dropping it releases
    /// nothing, and it is valid as long as the handle is.
    pub fn borrowed(&self) -> Tensor {
        Tensor { h: self.h, owned: false }
    }

    /// The tensor's dtype and shape (`tensor_shape`).
    pub fn dtype_shape(&self) -> Result<(DType, Vec<i64>)> {
        // u32 dtype, u32 ndim, then ndim i64: at most 8 + 8·16 bytes.
        let mut info = [0u64; 17];
        check(unsafe { sys::tensor_shape(self.h as i32, info.as_mut_ptr() as *mut u8) })?;
        let code = info[0] as u32;
        let ndim = ((info[0] >> 32) as usize).min(16);
        let dtype = DType::from_code(code).ok_or_else(|| Error::new(format!("zeroeng: the host reported dtype code {}", code)))?;
        Ok((dtype, info[1..1 + ndim].iter().map(|&d| d as i64).collect()))
    }

    /// The tensor's shape (`t.shape`).
    pub fn shape(&self) -> Result<Vec<i64>> {
        Ok(self.dtype_shape()?.1)
    }

    /// The tensor's dtype.
    pub fn dtype(&self) -> Result<DType> {
        Ok(self.dtype_shape()?.0)
    }

    /// The value of a one-element tensor (`t.item()`).
    pub fn item(&self) -> Result<f64> {
        self.method_f64("item", &[])
    }

    /// A tensor of `dtype` and `shape` from its bytes (row-major, little-endian).
    pub fn from_bytes(dtype: DType, shape: &[i64], data: &[u8]) -> Result<Tensor> {
        let mut h: u32 = 0;
        check(unsafe {
            sys::tensor_from_bytes(dtype as i32, shape.as_ptr(), shape.len() as i32, data.as_ptr(), data.len() as i32, &mut h)
        })?;
        Ok(Tensor::from_raw(h))
    }

    /// A float32 tensor of `shape` from `data`.
    pub fn from_f32s(data: &[f32], shape: &[i64]) -> Result<Tensor> {
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        Tensor::from_bytes(DType::Float32, shape, &bytes)
    }

    /// A float64 tensor of `shape` from `data`.
    pub fn from_f64s(data: &[f64], shape: &[i64]) -> Result<Tensor> {
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        Tensor::from_bytes(DType::Float64, shape, &bytes)
    }

    /// An int64 tensor of `shape` from `data`.
    pub fn from_i64s(data: &[i64], shape: &[i64]) -> Result<Tensor> {
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        Tensor::from_bytes(DType::Int64, shape, &bytes)
    }

    /// The tensor's bytes (row-major, its dtype, little-endian).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut n: u32 = 0;
        let st = unsafe { sys::tensor_data(self.h as i32, std::ptr::null_mut(), 0, &mut n) };
        if st == 0 {
            return Ok(Vec::new());
        }
        if st != Status::ERR_SIZE.0 {
            return Err(fail(st));
        }
        let mut b = vec![0u8; n as usize];
        check(unsafe { sys::tensor_data(self.h as i32, b.as_mut_ptr(), b.len() as i32, &mut n) })?;
        b.truncate(n as usize);
        Ok(b)
    }

    fn elements<const N: usize, T>(&self, want: DType, from: fn([u8; N]) -> T) -> Result<Vec<T>> {
        let dtype = self.dtype()?;
        if dtype != want {
            return Err(Error::new(format!("zeroeng: the tensor is {}, not {}", dtype.name(), want.name())));
        }
        let b = self.to_bytes()?;
        Ok(b.chunks_exact(N).map(|c| from(c.try_into().expect("chunks of N bytes"))).collect())
    }

    /// The elements of a float32 tensor (another dtype is an error: convert it first).
    pub fn to_f32s(&self) -> Result<Vec<f32>> {
        self.elements(DType::Float32, f32::from_le_bytes)
    }

    /// The elements of a float64 tensor.
    pub fn to_f64s(&self) -> Result<Vec<f64>> {
        self.elements(DType::Float64, f64::from_le_bytes)
    }

    /// The elements of an int64 tensor.
    pub fn to_i64s(&self) -> Result<Vec<i64>> {
        self.elements(DType::Int64, i64::from_le_bytes)
    }
}

impl Object {
    handle_methods!("object");

    pub(crate) fn with(h: u32, kind: Kind, owned: bool) -> Object {
        Object { h, kind, owned }
    }

    /// Takes over handle `h` of a value of `kind`: dropping the `Object` releases it.
    pub fn from_raw(h: u32, kind: Kind) -> Object {
        Object { h, kind, owned: true }
    }

    /// A second `Object` naming the same handle without owning it.
    pub fn borrowed(&self) -> Object {
        Object { h: self.h, kind: self.kind, owned: false }
    }

    /// What the handle stands for, as far as the SDK knows.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Calls this function with handles and numbers (ABI 1.1), for a tensor result:
    /// `lookup("nn.functional.relu")?.invoke(&[(&x).into()])`.
    pub fn invoke(&self, args: &[Arg]) -> Result<Tensor> {
        Ok(Tensor::with(returned("function", "invoke", self.invoke_raw(args)?)?, true))
    }

    /// [`invoke`](Self::invoke) for a result that is another value.
    pub fn invoke_object(&self, args: &[Arg]) -> Result<Object> {
        Ok(Object::with(returned("function", "invoke", self.invoke_raw(args)?)?, Kind::Object, true))
    }

    /// [`invoke`](Self::invoke) for a result that is not wanted: a handle it returns is given
    /// back at once, as [`op_unit`](Tensor::op_unit) gives it back.
    pub fn invoke_unit(&self, args: &[Arg]) -> Result<()> {
        let h = self.invoke_raw(args)?;
        if h != 0 {
            forget_quietly(h);
        }
        Ok(())
    }

    fn invoke_raw(&self, args: &[Arg]) -> Result<u32> {
        let r = records(args)?;
        let mut out: u32 = 0;
        check(unsafe { sys::invoke(self.h as i32, r.as_ptr() as *const u8, r.len() as i32, &mut out) })?;
        Ok(out)
    }
}

// ---- Scopes and grad mode -------------------------------------------------------------------

/// What a [`scope`]'s closure may return: the tensors in it are kept (they move to the
/// enclosing scope), as `tensor.scope` keeps what its function returns.
pub trait Keep {
    /// Adds the handles of the tensors to keep.
    fn tensors(&self, out: &mut Vec<u32>);
}

macro_rules! keep_nothing {
    ($($t:ty),*) => {$(
        impl Keep for $t {
            fn tensors(&self, _: &mut Vec<u32>) {}
        }
    )*};
}
keep_nothing!((), bool, f32, f64, i32, i64, u32, u64, usize, String, Object);

impl Keep for Tensor {
    fn tensors(&self, out: &mut Vec<u32>) {
        out.push(self.h);
    }
}

impl Keep for Value {
    fn tensors(&self, out: &mut Vec<u32>) {
        self.each_tensor(&mut |h| out.push(h));
    }
}

impl<T: Keep> Keep for Vec<T> {
    fn tensors(&self, out: &mut Vec<u32>) {
        self.iter().for_each(|t| t.tensors(out));
    }
}

impl<T: Keep> Keep for Option<T> {
    fn tensors(&self, out: &mut Vec<u32>) {
        if let Some(t) = self {
            t.tensors(out);
        }
    }
}

macro_rules! keep_tuple {
    ($($n:tt $t:ident),*) => {
        impl<$($t: Keep),*> Keep for ($($t,)*) {
            fn tensors(&self, out: &mut Vec<u32>) {
                $(self.$n.tensors(out);)*
            }
        }
    };
}
keep_tuple!(0 A, 1 B);
keep_tuple!(0 A, 1 B, 2 C);
keep_tuple!(0 A, 1 B, 2 C, 3 D);

/// Runs `f` in a scope (`tensor.scope`): every tensor made while it runs goes back to the
/// memory pool when it returns, but the tensors of what it returns, which move to the
/// enclosing scope. On an error nothing is kept.
///
/// ```ignore
/// // Only x and y stay: the uint8 images and labels go back when the scope closes.
/// let (x, y) = zeroeng::scope(|| {
///     let images = zeroeng::call_tensor("io.loadIdx", &zeroeng::args!["train-images-idx3-ubyte.gz"])?;
///     let labels = zeroeng::call_tensor("io.loadIdx", &zeroeng::args!["train-labels-idx1-ubyte.gz"])?;
///     let x = images.op("reshape", &[(-1).into(), 784.into()])?.op("float", &[])?;
///     Ok((x, labels.op("long", &[])?))
/// })?;
/// ```
pub fn scope<T: Keep>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let mut id: u32 = 0;
    check(unsafe { sys::scope_open(&mut id) })?;
    let r = f();
    let mut keep = Vec::new();
    if let Ok(v) = &r {
        v.tensors(&mut keep);
    }
    let closed = check(unsafe { sys::scope_close(id as i32, keep.as_ptr(), keep.len() as i32) });
    match (r, closed) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) | (Err(e), _) => Err(e),
    }
}

/// Runs `f` with autograd's recording off (`tensor.noGrad`), restoring it after.
pub fn no_grad<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    grad_mode(false, f)
}

/// Runs `f` with autograd's recording on or off, restoring it after.
pub fn grad_mode<T>(on: bool, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let mut was: u32 = 0;
    check(unsafe { sys::grad_enabled(on as i32, &mut was) })?;
    let r = f();
    let mut ignored: u32 = 0;
    let restored = check(unsafe { sys::grad_enabled(was as i32, &mut ignored) });
    match (r, restored) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) | (Err(e), _) => Err(e),
    }
}
