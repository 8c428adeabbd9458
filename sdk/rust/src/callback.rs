//! Callbacks (ABI 1.1): Rust closures as function values of the API.

use std::cell::RefCell;
use std::rc::Rc;

use crate::{check, read_result, sys, Error, Kind, Object, Result, Value};

/// A closure as the table holds it.
type Callback = Rc<dyn Fn(Vec<Value>) -> Result<Value>>;

thread_local! {
    /// The program's closures, by id: function_new's id is an index here.
    static CALLBACKS: RefCell<Vec<Callback>> = const { RefCell::new(Vec::new()) };
}

/// A Rust closure as a function value of the API (ABI 1.1): whatever takes a function takes
/// it, and calls the closure through the SDK's `zeroeng_callback` export.
///
/// ```ignore
/// // A module whose forward is Rust: DDP, zero.fullyShard and nn.utils.checkpointWrapper
/// // wrap it as they wrap a script's.
/// let fc = call_object("nn.Linear", &args![64, 64])?;
/// let block = call_object("nn.ModuleDict", &args![vec![Value::Array(vec!["fc".into(), (&fc).into()])]])?;
/// let forward = Function::new(move |args| {
///     let x = args[0].as_tensor().ok_or_else(|| Error::new("forward takes a tensor"))?;
///     Ok(fc.op("forward", &[x.into()])?.op("relu", &[])?.into())
/// })?;
/// block.set("forward", &(&forward).into())?;
/// ```
///
/// The closure gets the call's arguments; their handles only name the caller's values
/// (dropping them releases nothing, and they are valid until the closure returns). What it
/// returns is the function's value: its handles pass to the caller (the SDK gives them up),
/// and [`Value::Null`] returns `undefined`. An [`Error`] it returns is what the function
/// throws, with its message: the API call that led to it fails with that message.
///
/// The closure lives as long as the program: the API may keep the function after the
/// `Function`'s handle is released (a module's `forward`). Closures may call the API, which
/// may call other closures (or this one again): they are `Fn`, and keep what they change in
/// `Cell`s or `RefCell`s. A panic inside one traps, which fails the call that led to it.
#[derive(Debug)]
pub struct Function {
    object: Object,
    id: u32,
}

impl Function {
    /// Makes `f` a function value of the API (`function_new`).
    pub fn new<F>(f: F) -> Result<Function>
    where
        F: Fn(Vec<Value>) -> Result<Value> + 'static,
    {
        let id = CALLBACKS.with(|c| {
            let mut c = c.borrow_mut();
            c.push(Rc::new(f));
            c.len() - 1
        }) as u32;
        let mut h: u32 = 0;
        check(unsafe { sys::function_new(id as i32, &mut h) })?;
        Ok(Function { object: Object::with(h, Kind::Function, true), id })
    }

    /// The function's handle.
    pub fn object(&self) -> &Object {
        &self.object
    }

    /// The handle, taken out of the `Function` (the closure stays registered).
    pub fn into_object(self) -> Object {
        self.object
    }

    /// The id the closure has in the SDK's table (`zeroeng_callback`'s first argument).
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl From<&Function> for Value {
    /// Names the function's handle without owning it.
    fn from(f: &Function) -> Value {
        Value::from(f.object())
    }
}

/// The export every function made by [`Function::new`] calls (docs/wasm-program-abi.md,
/// version 1.1): runs closure `id` with frame `frame`'s arguments (`frame_args`), returns its
/// value (`frame_return`) and 0, or records its error (`error_set`) and returns 1.
#[no_mangle]
pub extern "C" fn zeroeng_callback(id: i32, frame: i32) -> i32 {
    let f = CALLBACKS.with(|c| c.borrow().get(id as usize).cloned());
    let result = match f {
        None => Err(Error::new(format!("zeroeng: the program has no callback {} (the SDK's table holds its Function closures)", id))),
        Some(f) => frame_args(frame).and_then(|args| f(args)).and_then(|v| frame_return(frame, v)),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let m = e.message();
            unsafe { sys::error_set(m.as_ptr(), m.len() as i32) };
            1
        }
    }
}

/// The running callback's arguments; their handles are the frame's, only named.
fn frame_args(frame: i32) -> Result<Vec<Value>> {
    let v = read_result(false, |out, cap, n| unsafe { sys::frame_args(frame, out, cap, n) })?;
    v.into_array()
}

/// Returns v from the running callback: its handles pass to the caller, so the SDK gives them
/// up rather than releasing them. Null returns undefined (no frame_return at all).
fn frame_return(frame: i32, v: Value) -> Result<()> {
    if v.is_null() {
        return Ok(());
    }
    let json = v.to_json();
    check(unsafe { sys::frame_return(frame, json.as_ptr(), json.len() as i32) })?;
    v.forget();
    Ok(())
}
