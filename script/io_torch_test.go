package script

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/zeroeng/zeroeng/engine/torchfile"
)

// torchFixtures is where engine/torchfile keeps the files torch.save wrote
// (its testdata/gen.py).
const torchFixtures = "../engine/torchfile/testdata"

func torchFixture(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(torchFixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIOLoadPyTorch: io.load reads PyTorch's own files as the script's
// values: a state dict as an object of tensors (DDP's "module." keys
// kept), tied weights as one tensor, views as tensors of their own, a
// checkpoint as nested objects with an optimizer's state, the legacy
// format; a file that names code is refused, naming what it would run.
func TestIOLoadPyTorch(t *testing.T) {
	runCases(t, []evalCase{
		{name: "a state dict of every dtype", src: fmt.Sprintf(`const sd = io.load(%q);
console.log(Object.keys(sd).map(k => k + ":" + sd[k].dtype + ":" + JSON.stringify(sd[k].shape)).join(" "));
console.log(sd.i8.toArray().join(","), sd.bool.toArray().join(","), sd.scalar.item(), sd.bf16.toArray()[0][0])`, torchFixture(t, "dtypes.pt")),
			want: `f32:float32:[2,3] f64:float64:[2,3] f16:float16:[2,3] bf16:bfloat16:[2,3] i64:int64:[4] i32:int32:[2,2] i16:int32:[3] i8:int32:[3] u8:uint8:[6] bool:bool:[3] scalar:float32:[] empty:float32:[0,3]` +
				"\n-128,-1,127 true,false,true 3.25 -1.5"},
		{name: "views and tied weights", src: fmt.Sprintf(`const sd = io.load(%q);
console.log(sd["module.base"] === sd["module.tied"], JSON.stringify(sd["module.window"].toArray()), sd["module.t"].shape, sd["module.expanded"].toArray().join("|"));
sd["module.window"].fill_(0); console.log(sd["module.base"].sum().item())`, torchFixture(t, "views.pt")),
			want: "true [[8,9,10],[14,15,16],[20,21,22]] [ 6, 4 ] 0,1,2|0,1,2\n276"},
		{name: "a checkpoint", src: fmt.Sprintf(`const ck = io.load(%q);
const g = ck.optimizer.param_groups[0];
console.log(Object.keys(ck.model).join(" "), ck.epoch, ck.loss, ck.name, ck.big, ck.neg, ck.none, ck.flags.join(","));
console.log(Object.keys(ck.optimizer.state).join(" "), Object.keys(ck.optimizer.state[0]).join(" "), ck.optimizer.state[0].step.item());
console.log(g.lr, JSON.stringify(g.betas), g.eps, g.amsgrad, g.foreach, JSON.stringify(g.params), ck.nested.a.b.c.toArray().join(","))`, torchFixture(t, "nested.pt")),
			want: "weight bias 3 0.25 linear é 1099511627776 -7 null true,false\n0 1 step exp_avg exp_avg_sq 1\n0.1 [0.9,0.999] 1e-08 false null [0,1] 1,2"},
		{name: "a state dict loads into a module", src: fmt.Sprintf(`const m = nn.Linear(3, 2); const r = m.loadStateDict(io.load(%q).model);
console.log(JSON.stringify(r), m.weight.shape)`, torchFixture(t, "nested.pt")),
			want: `{"missingKeys":[],"unexpectedKeys":[]} [ 2, 3 ]`},
		{name: "the legacy format", src: fmt.Sprintf(`const sd = io.load(%q); console.log(Object.keys(sd).length, sd["module.row"].toArray().join(","))`, torchFixture(t, "legacy.pt")),
			want: "7 12,13,14,15,16,17"},
		{name: "a single tensor", src: fmt.Sprintf(`console.log(io.load(%q).sum().item())`, torchFixture(t, "tensor.pt")), want: "15"},
		{name: "a key __proto__", src: fmt.Sprintf(`const d = io.load(%q); console.log(JSON.stringify(Object.keys(d)), Object.getPrototypeOf(d) === Object.prototype, d.__proto__)`, protoFile(t)),
			want: `["__proto__","x"] true 1`},
		{name: "os.system", src: fmt.Sprintf(`io.load(%q)`, torchFixture(t, "evil_system.pt")), err: "global posix.system is not allowed"},
		{name: "builtins.eval", src: fmt.Sprintf(`io.load(%q)`, torchFixture(t, "evil_eval_legacy.pt")), err: "global builtins.eval is not allowed"},
		{name: "not a file", src: `io.load("missing.pt")`, err: "no such file"},
		{name: "no path", src: `io.load()`, err: "io.load: expects a file path, got undefined"},
	})
}

// protoFile is a PyTorch file of {"__proto__": 1, "x": 2}.
func protoFile(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "proto.pt")
	d := &torchfile.Dict{Items: []torchfile.Item{{Key: "__proto__", Value: int64(1)}, {Key: "x", Value: int64(2)}}}
	if err := torchfile.WriteFile(path, d); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestIOSaveRoundTrip: io.save writes what io.load reads back as the same
// values: tensors of every dtype and views, nested objects and arrays,
// numbers, strings, booleans and null, tied tensors as one; and objects
// it cannot write are errors that say where they are.
func TestIOSaveRoundTrip(t *testing.T) {
	const build = `const w = tensor.arange(0, 6).reshape([2, 3]).float();
const obj = { model: { "module.w": w, "module.tied": w, "module.wt": w.t(), bf: w.bfloat16(), h: w.half(), d: w.double(),
    i: tensor.arange(0, 3), i32: tensor.arange(0, 3).to("int32"), u8: tensor.arange(0, 3).to("uint8"), b: w.gt(2), s: tensor.tensor(2.5) },
  optimizer: { state: { 0: { step: 3 } }, param_groups: [{ lr: 0.5, betas: [0.9, 0.999], params: [0], foreach: null, amsgrad: false }] },
  name: "modèle" };
`
	runCases(t, []evalCase{
		{name: "round trip", src: build + `io.save(obj, "ck.pt"); const back = io.load("ck.pt");
console.log(JSON.stringify(Object.keys(back)), JSON.stringify(Object.keys(back.model)));
console.log(back.model["module.w"] === back.model["module.tied"], JSON.stringify(back.model["module.wt"].toArray()), back.model.bf.dtype, back.model.b.toArray().join(","));
console.log(Object.keys(back.model).every(k => back.model[k].dtype === obj.model[k].dtype && back.model[k].eq(obj.model[k]).all().item()));
console.log(JSON.stringify(back.optimizer), back.name)`,
			want: `["model","optimizer","name"] ["module.w","module.tied","module.wt","bf","h","d","i","i32","u8","b","s"]` + "\n" +
				`true [[0,3],[1,4],[2,5]] bfloat16 false,false,false,true,true,true` + "\ntrue\n" +
				`{"state":{"0":{"step":3}},"param_groups":[{"lr":0.5,"betas":[0.9,0.999],"params":[0],"foreach":null,"amsgrad":false}]} modèle`},
		{name: "a module's state dict", src: `const m = nn.Linear(2, 2); io.save(m.stateDict(), "m.pt"); const m2 = nn.Linear(2, 2); m2.loadStateDict(io.load("m.pt"));
console.log(m2.weight.eq(m.weight).all().item(), m2.bias.eq(m.bias).all().item())`, want: "true true"},
		{name: "path first", src: `io.save("m.pt", {})`, err: "io.save: takes (obj, path), the object first, as torch.save does"},
		{name: "undefined", src: `io.save({ a: { b: undefined } }, "x.pt")`, err: `io.save: the object["a"]["b"] is undefined`},
		{name: "a function", src: `io.save([() => 1], "x.pt")`, err: "io.save: the object[0] is a function"},
		{name: "a module", src: `io.save({ m: nn.Linear(1, 1) }, "x.pt")`, err: `io.save: the object["m"] is a module or an optimizer: save its stateDict()`},
		{name: "a Map", src: `io.save(new Map(), "x.pt")`, err: "io.save: the object is [object Map]"},
		{name: "a cycle", src: `const a = { }; a.self = [a]; io.save(a, "x.pt")`, err: `io.save: the object["self"][0] contains itself`},
		{name: "a released tensor", src: `const t = tensor.ones([2]); t.release(); io.save({ t }, "x.pt")`, err: "io.save: the tensor was released"},
	})
}

// TestIOSaveForPyTorch: PyTorch (Debian's python3-torch) loads what io.save
// wrote: the dtypes, shapes and values, a transposed view as its values,
// int and float numbers, an optimizer's state keyed by ints, tuples as
// lists.
func TestIOSaveForPyTorch(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("needs %s with PyTorch (Debian's python3-torch): %v", python, err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.pt")
	src := fmt.Sprintf(`const { tensor, io } = require("zeroeng");
const w = tensor.arange(0, 6).reshape([2, 3]).float();
io.save({ model: { w, wt: w.t(), bf: w.bfloat16().div(4), i: tensor.arange(0, 3), b: w.gt(2), s: tensor.tensor(2.5).double() },
  step: 3, lr: 0.5, state: { 0: { n: 1 } }, betas: [0.9, 0.999], name: "x", none: null, yes: true }, %q);`, path)
	if out, err := runScript(t, dir, "save.js", src, Options{AutoRelease: true}); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := exec.Command(python, torchFixtures+"/gen.py", "describe", path).CombinedOutput()
	if bytes.Contains(out, []byte("No module named 'torch'")) {
		t.Skipf("needs %s with PyTorch (Debian's python3-torch): %s", python, out)
	}
	if err != nil {
		t.Fatalf("torch.load: %v\n%s", err, out)
	}
	tensorJSON := func(dt string, shape string, values string) string {
		return fmt.Sprintf(`{"tensor": %q, "shape": %s, "values": %s}`, dt, shape, values)
	}
	want := `{"dict": [
 ["model", {"dict": [
   ["w", ` + tensorJSON("float32", "[2, 3]", "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]") + `],
   ["wt", ` + tensorJSON("float32", "[3, 2]", "[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]") + `],
   ["bf", ` + tensorJSON("bfloat16", "[2, 3]", "[0.0, 0.25, 0.5, 0.75, 1.0, 1.25]") + `],
   ["i", ` + tensorJSON("int64", "[3]", "[0, 1, 2]") + `],
   ["b", ` + tensorJSON("bool", "[2, 3]", "[0, 0, 0, 1, 1, 1]") + `],
   ["s", ` + tensorJSON("float64", "[]", "[2.5]") + `]]}],
 ["step", {"int": 3}], ["lr", {"float": 0.5}],
 ["state", {"dict": [[0, {"dict": [["n", {"int": 1}]]}]]}],
 ["betas", {"list": [{"float": 0.9}, {"float": 0.999}]}],
 ["name", {"str": "x"}], ["none", {"none": null}], ["yes", {"bool": true}]]}`
	var got, exp any
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, exp) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(exp)
		t.Errorf("PyTorch loaded\n%s\nwant\n%s", g, w)
	}
}
