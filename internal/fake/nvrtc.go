//go:build darwin || freebsd || linux || netbsd

package fake

import (
	_ "embed"
	"testing"

	"github.com/ebitengine/purego"
)

//go:embed nvrtc.c
var nvrtcSource string

var nvrtcLib = fakeLib{soname: "libnvrtc.so.12", file: "nvrtc.c"}

// NVRTC returns the path of the fake NVRTC built from nvrtc.c (NVRTC 12.4;
// see the file's comment for what it does), or skips the test when there is
// no C compiler.
func NVRTC(tb testing.TB) string {
	tb.Helper()
	return nvrtcLib.path(tb, nvrtcSource)
}

// NVRTCControl reaches the fake NVRTC's test-only functions. It opens the
// same library as the binding (the dynamic loader returns the same
// handle), so both see the same state.
type NVRTCControl struct {
	path string

	reset      func()
	live       func() int32
	numOptions func() int32
	option     func(i int32) string
	numHeaders func() int32
	headerName func(i int32) string
	name       func() string
	fail       func(call, result int32)
}

// OpenNVRTC builds (once per process) and opens the fake NVRTC, resets its
// records and injected errors, and returns its controls.
func OpenNVRTC(tb testing.TB) *NVRTCControl {
	tb.Helper()
	c := &NVRTCControl{path: NVRTC(tb)}
	h := dlopenFake(tb, c.path)
	purego.RegisterLibFunc(&c.reset, h, "fakenvrtc_reset")
	purego.RegisterLibFunc(&c.live, h, "fakenvrtc_live_programs")
	purego.RegisterLibFunc(&c.numOptions, h, "fakenvrtc_num_options")
	purego.RegisterLibFunc(&c.option, h, "fakenvrtc_option")
	purego.RegisterLibFunc(&c.numHeaders, h, "fakenvrtc_num_headers")
	purego.RegisterLibFunc(&c.headerName, h, "fakenvrtc_header_name")
	purego.RegisterLibFunc(&c.name, h, "fakenvrtc_name")
	purego.RegisterLibFunc(&c.fail, h, "fakenvrtc_fail")
	c.reset()
	return c
}

// Path is the library's path, for nvrtc.LoadFrom.
func (c *NVRTCControl) Path() string { return c.path }

// Reset clears the records and injected errors.
func (c *NVRTCControl) Reset() { c.reset() }

// Options are the options of the last nvrtcCompileProgram, in order.
func (c *NVRTCControl) Options() []string {
	out := []string{}
	for i := range c.numOptions() {
		out = append(out, c.option(i))
	}
	return out
}

// HeaderNames are the include names of the last compiled program, in the
// order nvrtcCreateProgram received them.
func (c *NVRTCControl) HeaderNames() []string {
	out := []string{}
	for i := range c.numHeaders() {
		out = append(out, c.headerName(i))
	}
	return out
}

// Name is the name of the last compiled program.
func (c *NVRTCControl) Name() string { return c.name() }

// LivePrograms is the number of programs created and not destroyed.
func (c *NVRTCControl) LivePrograms() int { return int(c.live()) }

// Fail makes every later call of the function named call
// ("nvrtcCreateProgram" or "nvrtcCompileProgram") return result, until
// Reset.
func (c *NVRTCControl) Fail(tb testing.TB, call string, result int) {
	tb.Helper()
	switch call {
	case "nvrtcCreateProgram":
		c.fail(1, int32(result))
	case "nvrtcCompileProgram":
		c.fail(2, int32(result))
	default:
		tb.Fatalf("fake NVRTC cannot fail %s", call)
	}
}
