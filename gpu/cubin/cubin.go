// Package cubin reads what NVIDIA's compiler records about each kernel of a
// CUBIN, the ELF image of compiled code for one GPU architecture that NVRTC
// returns: the registers a thread uses, the block size the kernel was
// compiled for (its __launch_bounds__) and the stack frame a thread needs
// (non-zero when registers spilled to local memory). zeroeng checks them
// when it builds its kernels (`zeroeng kernels build`), so that a kernel
// whose registers do not fit its blocks is found on the machine that
// compiles it, not at the first launch on a GPU.
//
// The facts live in the image's .nv.info sections as attribute records
// (format byte, attribute byte, then a value or a length and a payload):
// EIATTR_REGCOUNT and EIATTR_FRAME_SIZE in the image-wide .nv.info, keyed
// by the kernel's symbol, and EIATTR_MAX_THREADS in the kernel's own
// .nv.info.<name>. The image is outside input (it comes from a compiler or
// a cache on disk): every offset is checked, and a malformed image is an
// error, never a panic.
package cubin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Kernel is what the image records about one kernel.
type Kernel struct {
	Name      string
	Registers int // registers a thread
	// MaxThreads is the block size the kernel was compiled for (the
	// product of its __launch_bounds__ or .maxntid dimensions); 0 when
	// none was given, which lets the compiler use up to 255 registers.
	MaxThreads int
	FrameBytes int // stack frame a thread, in bytes: spilled registers and local arrays
}

// RegistersPerBlock is what a block of threads needs from the register
// file: registers are given to each warp in units of 256 (8 a thread), as
// on every architecture from sm_50 to sm_90.
func (k Kernel) RegistersPerBlock(threads int) int {
	perThread := (k.Registers + 7) / 8 * 8
	warps := (threads + 31) / 32
	return warps * 32 * perThread
}

// RegisterFile is the registers a block may use on sm_50 to sm_90.
const RegisterFile = 64 << 10

// Image is a parsed CUBIN.
type Image struct {
	Arch    int      // the SM version: 90 for sm_90
	Kernels []Kernel // sorted by name
}

// Kernel returns the kernel named name.
func (im *Image) Kernel(name string) (Kernel, bool) {
	i := sort.Search(len(im.Kernels), func(i int) bool { return im.Kernels[i].Name >= name })
	if i < len(im.Kernels) && im.Kernels[i].Name == name {
		return im.Kernels[i], true
	}
	return Kernel{}, false
}

// ELF constants used here.
const (
	elfHeaderSize  = 64
	sectionHdrSize = 64
	symbolSize     = 24
	emCUDA         = 190 // e_machine of NVIDIA's CUDA images
	shtSymtab      = 2
	sttFunc        = 2
)

// .nv.info record formats and the attributes read.
const (
	fmtNoValue  = 1 // EIFMT_NVAL: no payload
	fmtByte     = 2 // EIFMT_BVAL: one byte
	fmtHalf     = 3 // EIFMT_HVAL: two bytes
	fmtSized    = 4 // EIFMT_SVAL: a two-byte length, then the payload
	attrMaxThr  = 0x05
	attrFrame   = 0x11
	attrRegs    = 0x2f
	infoSection = ".nv.info"
)

// ErrNotCUBIN is returned for data that is not a 64-bit little-endian ELF
// image for a CUDA GPU (PTX text, say).
var ErrNotCUBIN = errors.New("cubin: not a CUDA ELF image")

type section struct {
	name         string
	typ          uint32
	offset, size uint64
	link, info   uint32
}

// Parse reads the kernels of a CUBIN.
func Parse(b []byte) (*Image, error) {
	if len(b) < 6 || string(b[:4]) != "\x7fELF" || b[4] != 2 || b[5] != 1 {
		return nil, ErrNotCUBIN
	}
	if len(b) < elfHeaderSize {
		return nil, errors.New("cubin: ELF header cut short")
	}
	le := binary.LittleEndian
	if le.Uint16(b[18:]) != emCUDA {
		return nil, fmt.Errorf("%w (machine %d)", ErrNotCUBIN, le.Uint16(b[18:]))
	}
	// e_flags holds the SM version in its low byte (0x5a for sm_90).
	im := &Image{Arch: int(le.Uint32(b[48:]) & 0xff)}
	shoff, shentsize, shnum, shstrndx := le.Uint64(b[40:]), int(le.Uint16(b[58:])), int(le.Uint16(b[60:])), int(le.Uint16(b[62:]))
	if shentsize < sectionHdrSize || shstrndx >= shnum {
		return nil, errors.New("cubin: bad section header table")
	}
	if shoff > uint64(len(b)) || uint64(shnum)*uint64(shentsize) > uint64(len(b))-shoff {
		return nil, errors.New("cubin: section header table past the end of the image")
	}
	secs := make([]section, shnum)
	for i := range secs {
		h := b[shoff+uint64(i*shentsize):]
		s := section{typ: le.Uint32(h[4:]), offset: le.Uint64(h[24:]), size: le.Uint64(h[32:]), link: le.Uint32(h[40:]), info: le.Uint32(h[44:])}
		if s.typ != 8 /* SHT_NOBITS */ && (s.offset > uint64(len(b)) || s.size > uint64(len(b))-s.offset) {
			return nil, fmt.Errorf("cubin: section %d past the end of the image", i)
		}
		secs[i] = s
	}
	shstr := data(b, secs[shstrndx])
	for i := range secs {
		name, err := cstring(shstr, uint64(le.Uint32(b[shoff+uint64(i*shentsize):])))
		if err != nil {
			return nil, fmt.Errorf("cubin: section %d: %w", i, err)
		}
		secs[i].name = name
	}

	// The symbol table names the kernels the .nv.info records refer to.
	var syms []string
	var symFunc []bool
	for _, s := range secs {
		if s.typ != shtSymtab {
			continue
		}
		if int(s.link) >= len(secs) {
			return nil, errors.New("cubin: symbol table without its string table")
		}
		strs, d := data(b, secs[s.link]), data(b, s)
		for off := 0; off+symbolSize <= len(d); off += symbolSize {
			name, err := cstring(strs, uint64(le.Uint32(d[off:])))
			if err != nil {
				return nil, fmt.Errorf("cubin: symbol %d: %w", off/symbolSize, err)
			}
			syms = append(syms, name)
			symFunc = append(symFunc, d[off+4]&0xf == sttFunc)
		}
		break
	}

	byName := map[string]*Kernel{}
	kernel := func(name string) *Kernel {
		k := byName[name]
		if k == nil {
			k = &Kernel{Name: name}
			byName[name] = k
		}
		return k
	}
	entries := map[string]bool{}
	for _, s := range secs {
		switch {
		case s.name == infoSection:
			err := records(data(b, s), func(attr byte, p []byte) error {
				if attr != attrRegs && attr != attrFrame {
					return nil
				}
				if len(p) != 8 {
					return fmt.Errorf("attribute %#x of %d bytes, want 8", attr, len(p))
				}
				sym := int(le.Uint32(p))
				if sym >= len(syms) || !symFunc[sym] {
					return fmt.Errorf("attribute %#x for symbol %d, which is not a function", attr, sym)
				}
				k := kernel(syms[sym])
				if attr == attrRegs {
					k.Registers = int(le.Uint32(p[4:]))
				} else {
					k.FrameBytes = int(le.Uint32(p[4:]))
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("cubin: %s: %w", s.name, err)
			}
		case strings.HasPrefix(s.name, infoSection+"."):
			name := strings.TrimPrefix(s.name, infoSection+".")
			entries[name] = true
			err := records(data(b, s), func(attr byte, p []byte) error {
				if attr != attrMaxThr {
					return nil
				}
				if len(p) != 12 {
					return fmt.Errorf("attribute %#x of %d bytes, want 12", attr, len(p))
				}
				n := uint64(1)
				for i := 0; i < 12; i += 4 {
					n *= uint64(le.Uint32(p[i:]))
				}
				if n > 1<<20 {
					return fmt.Errorf("a block of %d threads", n)
				}
				kernel(name).MaxThreads = int(n)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("cubin: %s: %w", s.name, err)
			}
		}
	}
	// Kernels (entry points) have a .nv.info.<name> section of their own;
	// the subroutines the compiler calls from them ($kernel$__cuda_sm20_div_u64)
	// have records in .nv.info only, and count in their caller's registers.
	for name, k := range byName {
		if entries[name] {
			im.Kernels = append(im.Kernels, *k)
		}
	}
	sort.Slice(im.Kernels, func(i, j int) bool { return im.Kernels[i].Name < im.Kernels[j].Name })
	return im, nil
}

// data is a section's bytes (checked to lie in b when the section table
// was read); SHT_NOBITS sections have none.
func data(b []byte, s section) []byte {
	if s.typ == 8 {
		return nil
	}
	return b[s.offset : s.offset+s.size]
}

// cstring is the NUL-terminated string at off in a string table.
func cstring(tab []byte, off uint64) (string, error) {
	if off >= uint64(len(tab)) {
		if off == 0 {
			return "", nil
		}
		return "", fmt.Errorf("name at %d past its string table of %d bytes", off, len(tab))
	}
	end := off
	for end < uint64(len(tab)) && tab[end] != 0 {
		end++
	}
	if end == uint64(len(tab)) {
		return "", errors.New("name without its terminating NUL")
	}
	return string(tab[off:end]), nil
}

// records calls f with each attribute record of a .nv.info section and its
// payload (nil for records without one). Every record starts with four
// bytes: its format, its attribute, then two bytes that are unused, a
// value, or the length of the payload that follows.
func records(d []byte, f func(attr byte, payload []byte) error) error {
	for i := 0; i < len(d); {
		if len(d)-i < 4 {
			return errors.New("a record cut short")
		}
		format, attr := d[i], d[i+1]
		var p []byte
		switch format {
		case fmtNoValue:
			i += 4
		case fmtByte, fmtHalf:
			p, i = d[i+2:i+4], i+4
		case fmtSized:
			n := int(binary.LittleEndian.Uint16(d[i+2:]))
			if len(d)-i-4 < n {
				return fmt.Errorf("attribute %#x of %d bytes past the end of the section", attr, n)
			}
			p, i = d[i+4:i+4+n], i+4+n
		default:
			return fmt.Errorf("record of unknown format %d at byte %d", format, i)
		}
		if err := f(attr, p); err != nil {
			return err
		}
	}
	return nil
}
