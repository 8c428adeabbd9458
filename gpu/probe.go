package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/zeroeng/zeroeng/gpu/cublas"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/libs"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
)

// LibReport is what the search for one library found.
type LibReport struct {
	Name    string // "CUDA driver"
	Path    string // where it was loaded from; "" when missing
	Source  libs.Source
	Version string
	Err     error // why it is missing or unusable
}

func (r LibReport) String() string {
	if r.Err != nil {
		return "missing: " + r.Err.Error()
	}
	return fmt.Sprintf("%s (%s, via %s)", r.Version, r.Path, r.Source)
}

// Report is what `zeroeng info` prints about the GPUs: the libraries found
// and the devices the driver sees.
type Report struct {
	Driver, NVRTC, CUBLAS LibReport
	// NCCL is left for the caller to fill: package nccl builds on this
	// one. A report whose NCCL has no Name did not look for it.
	NCCL       LibReport
	Devices    []*cuda.Device
	DevicesErr error
}

// Missing names what a GPU job would lack — the driver, a device, a
// library — or is empty; the report's lines say why each is missing.
func (r Report) Missing() []string {
	var out []string
	if r.Driver.Err != nil {
		out = append(out, r.Driver.Name)
	} else if r.DevicesErr != nil {
		out = append(out, "a GPU")
	}
	for _, l := range []LibReport{r.NVRTC, r.CUBLAS, r.NCCL} {
		if l.Name != "" && l.Err != nil {
			out = append(out, l.Name)
		}
	}
	return out
}

// Probe looks for the CUDA libraries and the GPUs, loading what it finds.
func Probe() Report {
	var r Report
	r.Driver.Name = cuda.Spec.Name
	if drv, err := cuda.Load(); err != nil {
		r.Driver.Err = err
		r.DevicesErr = errors.New("no CUDA driver")
	} else {
		r.Driver.Path, r.Driver.Source = drv.Lib.Path, drv.Lib.Source
		r.Driver.Version = "CUDA " + cudaVersion(drv.Version)
		r.Devices, r.DevicesErr = devices(drv)
	}
	r.NVRTC.Name = nvrtc.Spec.Name
	if l, err := nvrtc.Load(); err != nil {
		r.NVRTC.Err = err
	} else {
		r.NVRTC.Path, r.NVRTC.Source = l.Lib.Path, l.Lib.Source
		r.NVRTC.Version = fmt.Sprintf("%d.%d", l.Major, l.Minor)
	}
	r.CUBLAS.Name = cublas.Spec.Name
	if l, err := cublas.Load(); err != nil {
		r.CUBLAS.Err = err
	} else {
		r.CUBLAS.Path, r.CUBLAS.Source = l.Lib.Path, l.Lib.Source
		r.CUBLAS.Version = cublasVersion(l.Version)
	}
	return r
}

func devices(drv *cuda.Driver) ([]*cuda.Device, error) {
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("the driver sees no CUDA device")
	}
	var out []*cuda.Device
	for i := 0; i < n; i++ {
		dev, err := drv.Device(i)
		if err != nil {
			return out, err
		}
		out = append(out, dev)
	}
	return out, nil
}

// cudaVersion formats the driver's 1000·major + 10·minor.
func cudaVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// cublasVersion formats cuBLAS's 10000·major + 100·minor + patch
// (CUBLAS_VERSION since 11) or 1000·major + 100·minor + patch before.
func cublasVersion(v int) string {
	if v >= 100000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

// DeviceLine describes one GPU in a line.
func DeviceLine(d *cuda.Device) string {
	return fmt.Sprintf("cuda:%d %s (%s, %d SMs, %.1f GiB)", d.Ordinal, d.Name, d.Arch(), d.SMs, float64(d.TotalMem)/(1<<30))
}

// Summary is the one-line answer to "is there a usable GPU?".
func (r Report) Summary() string {
	switch {
	case r.Driver.Err != nil:
		return "none: " + firstLine(r.Driver.Err.Error())
	case r.DevicesErr != nil:
		return "none: " + r.DevicesErr.Error()
	}
	names := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		names[i] = DeviceLine(d)
	}
	return strings.Join(names, "; ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
