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
// and a deadline, at most maxUnauthenticated of them at once, and their
// failures are counted and logged at most every refusalLogEvery, so that a
// stranger cannot flood the log, the memory or rank 0's wait for the
// other ranks to leave.

const (
	nonceLen = 32
	// maxHandshakeFrame bounds the frames of a connection that has not
	// authenticated: a hello or an authentication answer.
	maxHandshakeFrame = 256
	// maxUnauthenticated bounds the connections still in their
	// handshake; more are closed at once.
	maxUnauthenticated = 64
	// refusalLogEvery is how often refused connections are reported.
	refusalLogEvery = 10 * time.Second
	// MinSecretLen is the shortest secret ListenWithSecret and
	// DialWithSecret accept.
	MinSecretLen = 16
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

func checkSecret(secret []byte) error {
	if secret != nil && len(secret) < MinSecretLen {
		return fmt.Errorf("rendezvous: the job secret has %d bytes; it needs at least %d random ones", len(secret), MinSecretLen)
	}
	return nil
}
