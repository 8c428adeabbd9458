//go:build darwin || freebsd || linux || netbsd

package nvrtc

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/libs"
	"github.com/zeroeng/zeroeng/internal/fake"
)

// open loads the fake NVRTC (internal/fake/nvrtc.c) through the
// binding, with its records reset.
func open(t *testing.T) (*Lib, *fake.NVRTCControl) {
	t.Helper()
	c := fake.OpenNVRTC(t)
	l, err := LoadFrom(c.Path())
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

func TestLoadFrom(t *testing.T) {
	l, c := open(t)
	if l.Major != 12 || l.Minor != 4 {
		t.Errorf("version %d.%d, want the fake's 12.4", l.Major, l.Minor)
	}
	if l.Lib.Path != c.Path() {
		t.Errorf("path %s, want %s", l.Lib.Path, c.Path())
	}
	if l.getCUBIN == 0 || l.supportedArchs == 0 {
		t.Error("optional functions the fake exports were not bound")
	}
}

// TestLoad checks that Load either finds a real NVRTC or says why not.
func TestLoad(t *testing.T) {
	l, err := Load()
	if err != nil {
		var nf *libs.NotFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("Load: %v (%T), want a libs.NotFoundError", err, err)
		}
		t.Logf("no NVRTC here: %v", err)
		return
	}
	t.Logf("NVRTC %d.%d at %s", l.Major, l.Minor, l.Lib.Path)
	if l2, _ := Load(); l2 != l {
		t.Error("Load does not return the same Lib twice")
	}
}

func TestCompile(t *testing.T) {
	l, c := open(t)
	const kernel = "extern \"C\" __global__ void k(float *x) { x[0] = 1; }\n"
	tests := []struct {
		name    string
		src     string
		headers map[string]string
		opts    []string
		// the expected PTX text after the options line (without the NUL)
		body        string
		cubin       string // the architecture in the CUBIN, "" for none
		wantHeaders []string
		logHas      string
	}{
		{name: "virtual architecture gives PTX", src: kernel,
			opts: []string{"--gpu-architecture=compute_90", "--std=c++17", "-DN=4"}, body: kernel},
		{name: "no options", src: kernel, body: kernel},
		{name: "-arch=sm_90 gives a CUBIN", src: kernel,
			opts: []string{"-arch=sm_90", "--device-as-default-execution-space"}, body: kernel, cubin: "sm_90"},
		{name: "--gpu-architecture=sm_80", src: kernel,
			opts: []string{"--std=c++17", "--gpu-architecture=sm_80"}, body: kernel, cubin: "sm_80"},
		{name: "-arch sm_86 in two options", src: kernel,
			opts: []string{"-arch", "sm_86"}, body: kernel, cubin: "sm_86"},
		{name: "headers reach the program",
			src:     "#include \"a.h\"\n" + kernel,
			headers: map[string]string{"b.h": "#define B 2\n", "a.h": "#include \"b.h\"\n#define A 1\n"},
			opts:    []string{"-arch=compute_80"},
			body:    "#define B 2\n#define A 1\n" + kernel, wantHeaders: []string{"a.h", "b.h"}},
		{name: "warnings reach the log", src: "#define X 1\n#warning careful now\n" + kernel,
			body: "#define X 1\n#warning careful now\n" + kernel, logHas: "t.cu(2): warning: #warning directive: careful now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := l.Compile(tt.src, "t.cu", tt.headers, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Options(); !slices.Equal(got, append([]string{}, tt.opts...)) {
				t.Errorf("options received %q, want %q", got, tt.opts)
			}
			if c.Name() != "t.cu" {
				t.Errorf("program name %q", c.Name())
			}
			want := "// fake nvrtc options:"
			for _, o := range tt.opts {
				want += " " + o
			}
			want += "\n" + tt.body
			if string(out.PTX) != want+"\x00" {
				t.Errorf("PTX\n%q\nwant\n%q (with its NUL)", out.PTX, want+"\x00")
			}
			switch {
			case tt.cubin == "" && out.CUBIN != nil:
				t.Errorf("a CUBIN for %q", tt.opts)
			case tt.cubin != "" && string(out.CUBIN) != "FAKECUBIN "+tt.cubin+"\n"+want:
				t.Errorf("CUBIN\n%q\nwant\n%q", out.CUBIN, "FAKECUBIN "+tt.cubin+"\n"+want)
			}
			if tt.wantHeaders != nil && !slices.Equal(c.HeaderNames(), tt.wantHeaders) {
				t.Errorf("include names %q, want %q", c.HeaderNames(), tt.wantHeaders)
			}
			if !strings.Contains(out.Log, tt.logHas) || (tt.logHas == "" && out.Log != "") {
				t.Errorf("log %q, want %q", out.Log, tt.logHas)
			}
			if n := c.LivePrograms(); n != 0 {
				t.Errorf("%d programs not destroyed", n)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	l, c := open(t)
	tests := []struct {
		name    string
		src     string
		headers map[string]string
		opts    []string
		fail    string // a call the fake fails with NVRTC_ERROR_OUT_OF_MEMORY
		want    string // the whole message
		code    int
	}{
		{name: "#error", src: "int a;\nint b;\n#error no luck here\n",
			want: "nvrtcCompileProgram(bad.cu): NVRTC_ERROR_COMPILATION: bad.cu(3): error: #error directive: no luck here",
			code: 6},
		{name: "#error in a header", src: "#include \"h.cuh\"\n", headers: map[string]string{"h.cuh": "\n#error in header\n"},
			want: "nvrtcCompileProgram(bad.cu): NVRTC_ERROR_COMPILATION: h.cuh(2): error: #error directive: in header",
			code: 6},
		{name: "missing header", src: "#include \"nope.h\"\n",
			want: "nvrtcCompileProgram(bad.cu): NVRTC_ERROR_COMPILATION: bad.cu(1): catastrophic error: cannot open source file \"nope.h\"",
			code: 6},
		{name: "invalid option", src: "int a;\n", opts: []string{"-arch=compute_90", "O3"},
			want: "nvrtcCompileProgram(bad.cu): NVRTC_ERROR_INVALID_OPTION: nvrtc: error: invalid option \"O3\"",
			code: 5},
		{name: "create fails", src: "int a;\n", fail: "nvrtcCreateProgram",
			want: "nvrtcCreateProgram(bad.cu): NVRTC_ERROR_OUT_OF_MEMORY", code: 1},
		{name: "compile fails without a log", src: "int a;\n", fail: "nvrtcCompileProgram",
			want: "nvrtcCompileProgram(bad.cu): NVRTC_ERROR_OUT_OF_MEMORY", code: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Reset()
			if tt.fail != "" {
				c.Fail(t, tt.fail, 1)
			}
			out, err := l.Compile(tt.src, "bad.cu", tt.headers, tt.opts)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Compile: %v, %v; want an *Error", out, err)
			}
			if e.Code != tt.code || err.Error() != tt.want {
				t.Errorf("error %d %q\nwant  %d %q", e.Code, err.Error(), tt.code, tt.want)
			}
			if n := c.LivePrograms(); n != 0 {
				t.Errorf("%d programs not destroyed", n)
			}
		})
	}
}

func TestSupportedArchs(t *testing.T) {
	l, _ := open(t)
	archs, err := l.SupportedArchs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(archs, 90) || !slices.IsSorted(archs) {
		t.Errorf("architectures %v, want the fake's sorted list with 90", archs)
	}
	old := *l
	old.supportedArchs, old.numSupportedArchs = 0, 0
	if _, err := old.SupportedArchs(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("without nvrtcGetSupportedArchs: %v, want errors.ErrUnsupported", err)
	}
}

// TestOldLibraryWithoutCUBIN compiles for a real architecture with a
// library that has no nvrtcGetCUBIN (before NVRTC 11.1): PTX only.
func TestOldLibraryWithoutCUBIN(t *testing.T) {
	l, _ := open(t)
	old := *l
	old.getCUBIN, old.getCUBINSize = 0, 0
	out, err := old.Compile("int a;\n", "old.cu", nil, []string{"-arch=sm_90"})
	if err != nil {
		t.Fatal(err)
	}
	if out.CUBIN != nil || len(out.PTX) == 0 {
		t.Errorf("CUBIN %q, PTX %q: want PTX only", out.CUBIN, out.PTX)
	}
}

func TestRealArch(t *testing.T) {
	tests := []struct {
		opts []string
		want bool
	}{
		{nil, false},
		{[]string{"-arch=sm_90"}, true},
		{[]string{"-arch=sm_90a"}, true},
		{[]string{"--gpu-architecture=sm_80"}, true},
		{[]string{"-arch", "sm_75"}, true},
		{[]string{"--gpu-architecture", "sm_75"}, true},
		{[]string{"-arch=compute_90"}, false},
		{[]string{"--gpu-architecture=compute_90"}, false},
		{[]string{"-arch=sm_90", "-arch=compute_90"}, false}, // the last one counts
		{[]string{"-arch=compute_90", "-arch=sm_90"}, true},
		{[]string{"-arch"}, false},
		{[]string{"-DARCH=sm_90"}, false},
	}
	for _, tt := range tests {
		if got := realArch(tt.opts); got != tt.want {
			t.Errorf("realArch(%q) = %v, want %v", tt.opts, got, tt.want)
		}
	}
}

func TestErrorNames(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Call: "nvrtcCompileProgram(k.cu)", Code: 6, Log: "k.cu(1): error: x\n"},
			"nvrtcCompileProgram(k.cu): NVRTC_ERROR_COMPILATION: k.cu(1): error: x"},
		{&Error{Call: "nvrtcGetPTX", Code: 17}, "nvrtcGetPTX: NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED"},
		{&Error{Call: "nvrtcGetPTX", Code: 99}, "nvrtcGetPTX: nvrtcResult 99"},
		{&Error{Call: "nvrtcGetPTX", Code: 99, name: "NVRTC_ERROR_FUTURE"}, "nvrtcGetPTX: NVRTC_ERROR_FUTURE"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%#v: %q, want %q", tt.err, got, tt.want)
		}
	}
}
