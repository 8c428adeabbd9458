package rendezvous

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"time"
)

// Authentication. A store made with a secret (ListenWithSecret) admits
// only clients that prove they know it, and proves it knows it too, before
// any request: after the hello the server sends a fresh random challenge;
// the client answers with its own nonce and
//
//	HMAC-SHA256(secret, "zeroeng-rendezvous client" ‖ challenge ‖ nonce)
//
// and the server, if that is right, with
//
//	HMAC-SHA256(secret, "zeroeng-rendezvous server" ‖ nonce ‖ challenge)
//
// The secret never crosses the wire, a recorded exchange is useless
// against the next challenge, and a client cannot be lured into a store
// that does not know the secret (which would then learn the NCCL unique
// id). Connections that have not authenticated are held to small frames
// and a deadline, at most maxUnauthenticated of them at once (the oldest
// of a flood makes room for a newcomer: admission.go), and their failures
// are counted and logged at most every refusalLogEvery, so that a
// stranger cannot flood the log, the memory or rank 0's wait for the
// other ranks to leave, nor keep the ranks out.

const (
	nonceLen = 32
	// maxHandshakeFrame bounds the frames of a connection that has not
	// authenticated: a hello or an authentication answer.
	maxHandshakeFrame = 256
	// maxUnauthenticated bounds the connections still in their
	// handshake; a newcomer beyond it takes the place of one of them
	// (admission.go).
	maxUnauthenticated = 64
	// refusalLogEvery is how often refused connections are reported.
	refusalLogEvery = 10 * time.Second
	// MinSecretLen is the shortest secret ListenWithSecret and
	// DialWithSecret accept.
	MinSecretLen = 16
	// MinSecretDistinct is the fewest distinct bytes a secret they accept
	// has: "aaaaaaaaaaaaaaaa" or a repeated word is long enough but no
	// secret, while 16 random bytes in hex (32 characters of 16) have 8
	// or more distinct but for a chance of 1 in 28 million.
	MinSecretDistinct = 8
	// makeSecret is how the error messages say to make a secret (as
	// README.md does).
	makeSecret = `export ZEROENG_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')`
)

func proof(secret []byte, who string, a, b []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("zeroeng-rendezvous " + who))
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

func nonce() []byte {
	b := make([]byte, nonceLen)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("rendezvous: no randomness: %v", err)) // crypto/rand does not fail on Linux
	}
	return b
}

// CheckSecret says whether ListenWithSecret, DialWithSecret and
// JoinWithSecret accept secret as a job's secret (nil: none, accepted):
// at least MinSecretLen bytes, of which at least MinSecretDistinct
// distinct, since a guessable secret protects nothing. The error says how
// to make a good one.
func CheckSecret(secret []byte) error {
	if secret == nil {
		return nil
	}
	if len(secret) < MinSecretLen {
		return fmt.Errorf("rendezvous: the job secret has %d bytes; it needs at least %d random ones (make one with %s)", len(secret), MinSecretLen, makeSecret)
	}
	var seen [256]bool
	distinct := 0
	for _, b := range secret {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	if distinct < MinSecretDistinct {
		// Never the secret itself: it may be the one of a running job.
		return fmt.Errorf("rendezvous: the job secret has only %d distinct characters in %d; it must be random, with at least %d distinct (make one with %s)", distinct, len(secret), MinSecretDistinct, makeSecret)
	}
	return nil
}
