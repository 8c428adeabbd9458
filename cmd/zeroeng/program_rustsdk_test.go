package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// rustSDKProgram exercises the Rust SDK (sdk/rust) against the host: each
// check prints "ok NAME"; a failed one prints "FAIL NAME: why" and the
// program exits 1.
const rustSDKProgram = `
use std::cell::Cell;
use std::rc::Rc;
use zeroeng::{args, call, call_f64, call_object, call_tensor, dict, lookup, no_grad, scope, Arg, DType, Error, Function, Result, Status, Tensor, Value};

fn check(name: &str, r: Result<()>) -> bool {
    match r {
        Ok(()) => { println!("ok {}", name); true }
        Err(e) => { println!("FAIL {}: {}", name, e); false }
    }
}

fn want(cond: bool, what: &str) -> Result<()> {
    if cond { Ok(()) } else { Err(Error::new(what)) }
}

fn main() {
    let mut good = true;
    good &= check("abi", (|| { let (major, minor) = zeroeng::abi_version(); want(major == 1 && minor >= 1, &format!("abi {}.{}", major, minor)) })());
    good &= check("bytes", (|| {
        let t = Tensor::from_f32s(&[1.5, -2.0, 3.25, 0.0, 5.0, 6.0], &[2, 3])?;
        want(t.shape()? == vec![2, 3] && t.dtype()? == DType::Float32, "shape or dtype")?;
        want(t.to_f32s()? == vec![1.5, -2.0, 3.25, 0.0, 5.0, 6.0], "float32 values")?;
        let i = Tensor::from_i64s(&[i64::MAX, -1], &[2])?;
        want(i.to_i64s()? == vec![i64::MAX, -1], "int64 values")?;
        want(i.to_f32s().is_err(), "an int64 tensor read as float32")?;
        let e = Tensor::from_f32s(&[], &[0, 4])?;
        want(e.to_bytes()?.is_empty() && e.shape()? == vec![0, 4], "an empty tensor")
    })());
    good &= check("numbers", (|| {
        // NaN, the infinities, -0 and the extremes travel through JSON exactly.
        let xs = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e-300, 5e-324, f64::MAX, 0.1 + 0.2, 1e21];
        let t = call_tensor("tensor.fromArray", &args![xs.iter().map(|&x| Value::from(x)).collect::<Vec<_>>(), dict! { "dtype" => "float64" }])?;
        let got = t.to_f64s()?;
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        want(got.len() == xs.len() && got.iter().zip(xs.iter()).all(|(&a, &b)| same(a, b)), &format!("{:?}", got))?;
        let back = t.method("tolist", &[])?.into_array()?;
        // (The host writes a result's -0 as 0, as JSON.stringify does.)
        want(back.len() == xs.len() && back.iter().zip(xs.iter()).all(|(a, &b)| a.as_f64().map_or(false, |a| same(a, b) || a == b)), "tolist")
    })());
    good &= check("errors", (|| {
        let e = call("nn.Linaer", &args![2, 2]).err().ok_or_else(|| Error::new("nn.Linaer succeeded"))?;
        want(e.status() == Status::ERR_INVALID && e.message().contains("did you mean Linear?"), e.message())?;
        // The failure was cleared: the next call works.
        let e = call_object("nn.Linear", &args![2, 2, dict! { "bais" => false }]).err().ok_or_else(|| Error::new("bad option accepted"))?;
        want(e.status() == Status::ERR_CALL && e.message().contains("bais"), e.message())?;
        want(call_f64("dist.worldSize", &[])? == 1.0, "worldSize")
    })());
    good &= check("large-result", (|| {
        let t = call_tensor("tensor.arange", &args![5000])?;
        let list = t.method("tolist", &[])?.into_array()?;
        want(list.len() == 5000 && list[4999].as_f64() == Some(4999.0), "arange(5000).tolist()")
    })());
    good &= check("ops", (|| {
        let x = Tensor::from_f32s(&[1.0, -2.0, 3.0], &[3])?;
        let y = x.op("mul", &[Arg::N(2.0)])?.op("add", &[(&x).into()])?;
        want(y.to_f32s()? == vec![3.0, -6.0, 9.0], "mul add")?;
        let relu = lookup("nn.functional.relu")?;
        want(relu.invoke(&[(&y).into()])?.to_f32s()? == vec![3.0, 0.0, 9.0], "relu")?;
        let sum = y.op("sum", &[])?;
        let e = sum.op("item", &[]).err().ok_or_else(|| Error::new("item by handle succeeded"))?;
        want(e.status() == Status::ERR_INVALID && e.message().contains("returned data"), e.message())?;
        want(sum.item()? == 6.0, "sum")
    })());
    good &= check("release", (|| {
        let t = call_tensor("tensor.ones", &args![4])?;
        let h = t.into_raw();
        Tensor::from_raw(h).release()?;
        let e = Tensor::from_raw(h).item().err().ok_or_else(|| Error::new("a released handle worked"))?;
        want(e.status() == Status::ERR_HANDLE, e.message())
    })());
    good &= check("scope", (|| {
        let mut inner = 0;
        let kept = scope(|| {
            let a = call_tensor("tensor.ones", &args![1024])?;
            let b = a.op("mul", &[Arg::N(3.0)])?;
            inner = a.op("add", &[Arg::N(1.0)])?.into_raw();
            Ok(b)
        })?;
        want(kept.op("sum", &[])?.item()? == 3072.0, "the kept tensor")?;
        let e = Tensor::from_raw(inner).item().err().ok_or_else(|| Error::new("a tensor of the closed scope lives"))?;
        want(e.message().contains("released"), e.message())?;
        let failed: Result<Tensor> = scope(|| Err(Error::new("inside")));
        want(failed.err().map(|e| e.message().to_string()) == Some("inside".to_string()), "a scope's error")
    })());
    good &= check("no_grad", (|| {
        let inside = no_grad(|| call("tensor.isGradEnabled", &[]))?;
        want(inside.as_bool() == Some(false) && call("tensor.isGradEnabled", &[])?.as_bool() == Some(true), "grad mode")
    })());
    good &= check("functions", (|| {
        let calls = Rc::new(Cell::new(0));
        let c = calls.clone();
        let double = Function::new(move |args: Vec<Value>| {
            c.set(c.get() + 1);
            let x = args.get(0).and_then(Value::as_tensor).ok_or_else(|| Error::new("want a tensor"))?;
            Ok(x.op("mul", &[Arg::N(2.0)])?.into())
        })?;
        let x = call_tensor("tensor.fromArray", &args![vec![Value::from(1.0), Value::from(2.0)], dict! { "dtype" => "float32", "requiresGrad" => true }])?;
        let y = call_tensor("nn.utils.checkpoint", &args![&double, &x])?;
        y.op("sum", &[])?.op_unit("backward", &[])?;
        let g = x.get("grad")?.into_tensor()?;
        want(y.to_f32s()? == vec![2.0, 4.0] && g.to_f32s()? == vec![2.0, 2.0], "checkpoint of a function")?;
        want(calls.get() == 2, &format!("the function ran {} times, want 2 (forward, and again in backward)", calls.get()))?;
        // Arguments of every kind, and a plain object returned; called through Function.prototype.call.
        let echo = Function::new(|args: Vec<Value>| {
            Ok(dict! { "n" => args.len(), "first" => args[0].as_f64(), "second" => args[1].as_str().unwrap_or("?"), "shape" => args[2].as_tensor().map(|t| t.shape().map(|s| s[0]).unwrap_or(-1)) })
        })?;
        let r = echo.object().method("call", &args![Value::Null, 7, "seven", &x])?;
        want(r.to_json() == r#"{"n":3,"first":7,"second":"seven","shape":2}"#, &r.to_json())?;
        // Null returns undefined.
        let nothing = Function::new(|_| Ok(Value::Null))?;
        want(nothing.object().method("call", &args![Value::Null])?.is_null(), "undefined")?;
        // An error inside fails the call that led to it, with its message; nested functions.
        let boom = Function::new(|_| Err(Error::new("boom from Rust")))?;
        let outer = Function::new(move |args: Vec<Value>| {
            let x = args[0].as_tensor().ok_or_else(|| Error::new("want a tensor"))?;
            Ok(call_tensor("nn.utils.checkpoint", &args![&boom, x])?.into())
        })?;
        let e = call("nn.utils.checkpoint", &args![&outer, &x]).err().ok_or_else(|| Error::new("the failing function succeeded"))?;
        want(e.status() == Status::ERR_CALL && e.message().contains("boom from Rust"), e.message())
    })());
    good &= check("module-forward", (|| {
        let fc = call_object("nn.Linear", &args![3, 2])?;
        let m = call_object("nn.ModuleDict", &args![vec![Value::Array(vec!["fc".into(), (&fc).into()])]])?;
        let forward = Function::new(move |args: Vec<Value>| {
            let x = args[0].as_tensor().ok_or_else(|| Error::new("want a tensor"))?;
            Ok(fc.op("forward", &[x.into()])?.op("relu", &[])?.into())
        })?;
        m.set("forward", &(&forward).into())?;
        let x = call_tensor("tensor.randn", &args![4, 3])?;
        let plain = m.op("forward", &[(&x).into()])?.to_f32s()?;
        call("nn.utils.checkpointWrapper", &args![&m])?;
        let wrapped = m.op("forward", &[(&x).into()])?;
        want(wrapped.to_f32s()? == plain, "checkpointWrapper changed the forward's values")?;
        let names: Vec<String> = m.method("namedParameters", &[])?.into_array()?.iter().filter_map(|p| p.as_array().and_then(|p| p[0].as_str()).map(String::from)).collect();
        want(names == vec!["fc.weight".to_string(), "fc.bias".to_string()], &format!("{:?}", names))
    })());
    good &= check("zero-init", (|| {
        let build = Function::new(|_| Ok(call_object("nn.Linear", &args![4, 4])?.into()))?;
        let model = call_object("zero.init", &args![&build])?;
        want(model.method_f64("numParameters", &[])? == 20.0, "zero.init's model")
    })());
    if !good {
        std::process::exit(1);
    }
}
`

// TestRustSDK runs a program over the Rust SDK (sdk/rust) that checks it
// against the host: tensors to and from bytes, numbers JSON cannot hold,
// failures with the host's message that the program goes on from, a result
// larger than the SDK's buffer, handle-only calls, handles released and
// scopes closed, grad mode, and functions of Rust closures (through
// nn.utils.checkpoint and its recomputation in backward, with arguments of
// every kind, nested, failing; a module's forward under checkpointWrapper;
// zero.init's builder).
func TestRustSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Rust program (rustc for wasm32-wasi): make test-all")
	}
	work := t.TempDir()
	prog := filepath.Join(work, "sdk.wasm")
	if err := os.WriteFile(prog, hookbuild.RustProgram(t, rustSDKProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	r := zeroeng(t, work, nil, "run", "--quiet", prog)
	checks := []string{"abi", "bytes", "numbers", "errors", "large-result", "ops", "release", "scope", "no_grad", "functions", "module-forward", "zero-init"}
	for _, c := range checks {
		if !strings.Contains(r.stdout, "ok "+c+"\n") {
			t.Errorf("check %s did not pass", c)
		}
	}
	if r.code != 0 || t.Failed() {
		t.Fatalf("status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
