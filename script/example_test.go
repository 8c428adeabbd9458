package script_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zeroeng/zeroeng/script"
)

// A Runtime runs JavaScript against one rank's engine; require("zeroeng")
// is the host API.
func ExampleRuntime_RunString() {
	r, err := script.New(script.Options{Stdout: os.Stdout, Seed: 0})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	_, err = r.RunString("example.js", `
		const { tensor } = require("zeroeng");
		const x = tensor.fromArray([1, 2, 3, 4], [2, 2], "float32");
		console.log(x.matmul(x).toArray());
		console.log(x.sum().item());
	`)
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// [ [ 7, 10 ], [ 15, 22 ] ]
	// 10
}

// A script error names the script position and carries the JavaScript
// stack; no Go stack trace is printed.
func ExampleError() {
	r, _ := script.New(script.Options{})
	defer r.Close()
	_, err := r.RunString("bad.js", `const { tensor } = require("zeroeng");
function f() { return tensor.ones([2, 3]).matmul(tensor.ones([4, 5])); }
f();`)
	if e, ok := err.(*script.Error); ok {
		fmt.Println(e.Position)
		fmt.Println(len(e.Stack) > 0)
	}
	// Output:
	// bad.js:2:49
	// true
}

// RunJob runs one script on several in-process ranks.
func ExampleRunJob() {
	dir, _ := os.MkdirTemp("", "zeroeng-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ranks.js")
	os.WriteFile(path, []byte(`const { dist } = require("zeroeng");
console.log("rank", dist.rank, "of", dist.worldSize);`), 0o644)

	err := script.RunJob(context.Background(), path, script.JobOptions{
		Ranks: 2,
		Rank:  script.Options{Stdout: os.Stdout},
		Setup: func(r *script.Runtime) error { return nil },
	})
	fmt.Println("error:", err)
	// Unordered output:
	// [0] rank 0 of 2
	// [1] rank 1 of 2
	// error: <nil>
}
