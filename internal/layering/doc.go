// Package layering holds the test that keeps the module's import graph in
// its floors: engine/ at the bottom (with its own order inside), then the
// back ends (gpu/, nccl/, mpi/), zero/, hooks/, script/, the programs over
// them (samples/, bench/, tools/) and cmd/ at the top, with internal/
// below everything. A package may import packages of its own floor or of
// lower ones, never of a higher one; layering_test.go has the table and
// RATIONALE.md ("Structure") the reasons.
package layering
