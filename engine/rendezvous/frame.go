package rendezvous

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The wire protocol. Every message, in both directions, is one frame:
//
//	frame = length:u32 body             length = len(body), 5 ≤ length ≤ MaxFrame
//	body  = op:u8 id:u32 field*
//	field = n:u32 bytes[n]
//
// Integers are big-endian. A request carries an id chosen by the client;
// the reply carries the same id, so that one connection multiplexes any
// number of outstanding requests (a Get that waits does not hold up a Set
// from another goroutine of the same client). Replies to requests that
// wait may come back in any order.
//
// Requests and their fields (K: a key, at most MaxKey bytes; V: a value,
// at most MaxValue bytes):
//
//	opHello       magic, version:u8 [, rank]
//	                                    rank: the one Join claims, in decimal, by
//	                                    which the store counts its refusals
//	opSet         K, V
//	opWait        params, K*            params = flags:u8 timeout:i64(ns) nAll:u32;
//	                                    the first nAll keys must all exist, any of the
//	                                    rest (abort keys) ends the wait early
//	opAdd         K, delta:i64
//	opCompareSet  K, expected V, desired V
//	opCheck       K*
//	opDelete      K
//	opNumKeys     (none)
//	opOnDrop      K, V                  when this connection ends, set K to V unless K
//	                                    exists; an empty K cancels
//	opAuth        nonce, proof          the answer to the hello's challenge (auth.go)
//
// The hello's reply is rOK with the magic, the version and a challenge,
// empty when the store does not authenticate; a client answers a
// challenge with opAuth before anything else, and the store's rOK then
// carries its own proof.
//
// Replies: rOK (fields depend on the request), rTimeout (the missing keys),
// rAborted (the abort key that appeared and its value), rError (a message),
// and rGoodbye (id 0: the server is shutting down).
const (
	opHello byte = 1 + iota
	opSet
	opWait
	opAdd
	opCompareSet
	opCheck
	opDelete
	opNumKeys
	opOnDrop
	opAuth
)

const (
	rOK byte = 0x80 + iota
	rTimeout
	rAborted
	rError
	rGoodbye
)

// Limits on what one frame may carry. A peer that exceeds them is cut off.
const (
	// MaxKey is the longest key, in bytes.
	MaxKey = 4 << 10
	// MaxValue is the largest value, in bytes.
	MaxValue = 64 << 20
	// MaxFrame is the largest frame body: a compare-and-set with two values
	// of MaxValue bytes and some room for headers.
	MaxFrame = 2*MaxValue + MaxKey + 1<<10
	// maxFields bounds the number of fields in a frame (the keys of one
	// Wait or Check), so that a frame of tiny fields cannot make the
	// parser allocate many times its own size in slice headers.
	maxFields = 1 << 16

	headerLen     = 5 // op + id
	waitParamsLen = 1 + 8 + 4
	waitFetch     = 1 // flags: reply with the values of the nAll keys
	protoMagic    = "zeroeng-rendezvous"
	protoVersion  = 2
)

// frame is one parsed message. Fields alias the frame's own buffer, each
// capped at its length so that appending to one cannot overwrite the next.
type frame struct {
	op     byte
	id     uint32
	fields [][]byte
}

var errMalformed = errors.New("malformed frame")

// readFrame reads one frame from r and parses it. It never allocates more
// than about twice the bytes that actually arrived: a length prefix that
// promises a large frame gets its buffer in steps as the bytes come in, so
// a peer that announces MaxFrame and sends ten bytes costs 64 KiB.
func readFrame(r io.Reader) (frame, error) { return readFrameLimit(r, MaxFrame) }

// readFrameLimit is readFrame for frames of at most limit bytes.
func readFrameLimit(r io.Reader, limit int) (frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < headerLen || uint64(n) > uint64(limit) {
		return frame{}, fmt.Errorf("%w: length %d outside [%d, %d]", errMalformed, n, headerLen, limit)
	}
	const step = 64 << 10
	size := int(n)
	body := make([]byte, min(size, step))
	if _, err := io.ReadFull(r, body); err != nil {
		return frame{}, truncated(err)
	}
	for len(body) < size {
		more := min(size-len(body), len(body)) // double what has arrived
		body = append(body, make([]byte, more)...)
		if _, err := io.ReadFull(r, body[len(body)-more:]); err != nil {
			return frame{}, truncated(err)
		}
	}
	return parseFrame(body)
}

func truncated(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseFrame parses a frame body (the bytes after the length prefix) and
// checks it against the limits and, for requests, against the shape of
// its op. It is the only parser of the protocol; everything it returns
// has been validated.
func parseFrame(body []byte) (frame, error) {
	if len(body) < headerLen || len(body) > MaxFrame {
		return frame{}, fmt.Errorf("%w: body of %d bytes", errMalformed, len(body))
	}
	f := frame{op: body[0], id: binary.BigEndian.Uint32(body[1:5])}
	rest := body[headerLen:]
	for len(rest) > 0 {
		if len(f.fields) == maxFields {
			return frame{}, fmt.Errorf("%w: more than %d fields", errMalformed, maxFields)
		}
		if len(rest) < 4 {
			return frame{}, fmt.Errorf("%w: %d stray bytes after field %d", errMalformed, len(rest), len(f.fields))
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if n > MaxValue {
			return frame{}, fmt.Errorf("%w: field %d of %d bytes is over the limit of %d", errMalformed, len(f.fields), n, MaxValue)
		}
		if uint64(n) > uint64(len(rest)) {
			return frame{}, fmt.Errorf("%w: field %d of %d bytes overruns the frame", errMalformed, len(f.fields), n)
		}
		f.fields = append(f.fields, rest[:n:n])
		rest = rest[n:]
	}
	if err := f.check(); err != nil {
		return frame{}, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return f, nil
}

// check validates the fields of a request against its op. Replies are
// only held to the generic limits: they come from the server, which the
// client trusts to answer what it asked.
func (f *frame) check() error {
	nf := len(f.fields)
	want := func(n int) error {
		if nf != n {
			return fmt.Errorf("op %d wants %d fields, has %d", f.op, n, nf)
		}
		return nil
	}
	keys := func(ks [][]byte) error {
		for _, k := range ks {
			if len(k) > MaxKey {
				return fmt.Errorf("key of %d bytes is over the limit of %d", len(k), MaxKey)
			}
		}
		return nil
	}
	switch f.op {
	case opHello:
		if nf == 3 {
			return nil // with the rank claimed (admission.go)
		}
		return want(2)
	case opSet:
		if err := want(2); err != nil {
			return err
		}
		return keys(f.fields[:1])
	case opCompareSet:
		if err := want(3); err != nil {
			return err
		}
		return keys(f.fields[:1])
	case opAdd:
		if err := want(2); err != nil {
			return err
		}
		if len(f.fields[1]) != 8 {
			return fmt.Errorf("add delta of %d bytes", len(f.fields[1]))
		}
		return keys(f.fields[:1])
	case opOnDrop:
		if err := want(2); err != nil {
			return err
		}
		return keys(f.fields[:1])
	case opDelete:
		if err := want(1); err != nil {
			return err
		}
		return keys(f.fields)
	case opNumKeys:
		return want(0)
	case opAuth:
		if err := want(2); err != nil {
			return err
		}
		if len(f.fields[0]) != nonceLen || len(f.fields[1]) != sha256.Size {
			return errors.New("authentication answer of the wrong size")
		}
		return nil
	case opCheck:
		return keys(f.fields)
	case opWait:
		if nf < 1 || len(f.fields[0]) != waitParamsLen {
			return errors.New("wait without its parameters")
		}
		if nAll := binary.BigEndian.Uint32(f.fields[0][9:]); uint64(nAll) > uint64(nf-1) {
			return fmt.Errorf("wait for %d keys with %d given", nAll, nf-1)
		}
		return keys(f.fields[1:])
	case rOK, rTimeout, rAborted, rError, rGoodbye:
		return nil
	}
	return fmt.Errorf("unknown op %d", f.op)
}

// appendFrame appends one encoded frame to buf.
func appendFrame(buf []byte, op byte, id uint32, fields ...[]byte) []byte {
	n := headerLen
	for _, f := range fields {
		n += 4 + len(f)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	buf = append(buf, op)
	buf = binary.BigEndian.AppendUint32(buf, id)
	for _, f := range fields {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

// encodeFrame returns one frame in a buffer of its exact size.
func encodeFrame(op byte, id uint32, fields ...[]byte) []byte {
	n := 4 + headerLen
	for _, f := range fields {
		n += 4 + len(f)
	}
	return appendFrame(make([]byte, 0, n), op, id, fields...)
}

// frameSize is the body length of a frame with these fields.
func frameSize(fields [][]byte) int {
	n := headerLen
	for _, f := range fields {
		n += 4 + len(f)
	}
	return n
}

func i64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func waitParams(fetch bool, timeout int64, nAll int) []byte {
	p := make([]byte, 0, waitParamsLen)
	var flags byte
	if fetch {
		flags |= waitFetch
	}
	p = append(p, flags)
	p = binary.BigEndian.AppendUint64(p, uint64(timeout))
	return binary.BigEndian.AppendUint32(p, uint32(nAll))
}
