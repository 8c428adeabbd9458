// Package rendezvous owns how the processes of a multi-process job find
// each other before they can talk through NCCL: a key-value store served
// over TCP, like PyTorch's TCPStore, and the join protocol on top of it.
//
// Rank 0 serves the store on MASTER_ADDR:MASTER_PORT (Listen, Server);
// every rank, rank 0 included, connects to it (Dial, Client) and uses it
// to exchange small values — the NCCL unique id — with Set, Get, Wait,
// Add, CompareSet, Check and Delete. Join does the rest of a job's start:
// it serves and dials, registers the process under its rank with its host
// and pid, and waits for every rank, turning the ways a start goes wrong
// into errors that name the culprit instead of hangs: ranks that never
// arrive, ranks that disagree on WORLD_SIZE, two processes with one rank,
// a store that belongs to another job. A Rendezvous then carries failure
// reports between ranks (Fail, Failed), barriers, and an orderly end in
// which rank 0 keeps the store up until every other rank has left.
//
// A store made with a secret (ListenWithSecret, JoinWithSecret) admits
// only the processes that prove they have it, and proves it has it too,
// by HMAC over fresh challenges; strangers are held to tiny frames, few
// connections and one counted log line (auth.go), and cannot keep the
// ranks out by holding connections: when the store has no room, a
// stranger's connection makes room for a newcomer (admission.go).
//
// The wire protocol is this package's own: length-prefixed binary frames
// (frame.go describes them), with request ids so that one connection
// carries any number of concurrent requests. Keys are at most MaxKey
// bytes and values MaxValue; a peer that sends anything else is cut off.
//
// Keys under "rdzv/" belong to Join.
package rendezvous
