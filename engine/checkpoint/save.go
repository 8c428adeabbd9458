package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/internal/fileio"
)

// SaveOptions tune Save.
type SaveOptions struct {
	// Keep is how many checkpoints stay under the directory, the new one
	// included; older ones are removed after it is in place. 0 keeps all.
	Keep int
	// Consolidated also writes <key>.safetensors, the file PyTorch loads,
	// for the modules saved in slices (Module.Sharded): rank 0 writes it
	// one tensor at a time, every rank sending it its part of each. Other
	// modules always have theirs.
	Consolidated bool
	// Warn receives, on rank 0, what a save has to tell beside its
	// result: that the checkpoint it wrote holds NaN or infinite
	// parameters, and which checkpoint with finite ones it kept (see
	// prune). Nil writes it to standard error.
	Warn func(msg string)
}

// rankReport is what each rank tells rank 0 after writing its files.
type rankReport struct {
	Err   string     `json:"err,omitempty"`
	Files []FileInfo `json:"files"`
	RNG   []byte     `json:"rng"`
	// NonFinite names the rank's files of modules that hold NaN or
	// infinite values: under ZeRO stage 3 each rank sees only its slices,
	// and the model is finite only if every rank's are.
	NonFinite []string `json:"nonfinite,omitempty"`
}

// Save writes st as the checkpoint of step under dir and returns its
// folder. It is collective: every rank of pg calls it with its own state.
// Either every rank returns the new checkpoint, in place and pointed to by
// latest, or every rank returns the same error and dir is as it was.
func Save(pg dist.ProcessGroup, dir string, step int64, st *State, opts SaveOptions) (string, error) {
	if step < 0 {
		return "", fmt.Errorf("checkpoint: step %d is negative", step)
	}
	rank, world := pg.Rank(), pg.Size()
	name := StepName(step)
	final := filepath.Join(dir, name)
	tmp := filepath.Join(dir, ".tmp-"+name)

	// Rank 0 prepares an empty temporary folder; a failure there stops
	// every rank before anything is written.
	var err error
	if rank == 0 {
		err = prepare(dir, tmp)
	}
	if err := agree(pg, err); err != nil {
		return "", err
	}

	report := rankReport{RNG: st.RNG}
	files, infos, nonfinite, err := writeRank(pg, tmp, st, opts)
	report.Files, report.NonFinite = files, nonfinite
	if err != nil {
		report.Err = err.Error()
	}
	payload, err := json.Marshal(report)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	reports, err := pg.GatherObject(payload, 0)
	if err != nil {
		return "", err
	}
	if rank == 0 {
		err = commit(dir, tmp, final, step, world, st, infos, reports, opts)
		if err != nil {
			os.RemoveAll(tmp)
		}
	}
	if err := agree(pg, err); err != nil {
		return "", err
	}
	return final, nil
}

// prepare makes dir and an empty temporary folder in it, and removes the
// leftovers of saves that a crash interrupted.
func prepare(dir, tmp string) error {
	removing.Wait()
	if err := Lock(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-step-") || strings.HasPrefix(e.Name(), ".old-step-") || strings.HasPrefix(e.Name(), "."+LatestName+".tmp") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("checkpoint: removing an interrupted save: %w", err)
			}
		}
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// writeRank writes this rank's files into tmp: on rank 0 the modules and
// the plain optimizers, on every rank its ZeRO shards and its slices of
// the sharded modules. It also returns what rank 0 records of the
// optimizers, and the files of modules that hold NaN or infinite values.
// The files are written concurrently, so that one file's sync to disk
// overlaps the writing of the next; the consolidated files of sharded
// modules, which take collectives, first, on the rank's goroutine.
func writeRank(pg dist.ProcessGroup, tmp string, st *State, opts SaveOptions) ([]FileInfo, []OptimizerInfo, []string, error) {
	rank, world := pg.Rank(), pg.Size()
	if err := st.checkKeys(); err != nil {
		return nil, nil, nil, err
	}
	var files []FileInfo
	// Each writer says whether its file's values are all finite (an
	// optimizer's file is not checked: the parameters are what a resume
	// is judged by).
	var writers []func() (FileInfo, bool, error)
	layouts := make([]*moduleLayout, len(st.Modules))
	var lerr error
	sharded := false
	for i, m := range st.Modules {
		if m.Sharded == nil {
			continue
		}
		sharded = true
		if layouts[i], lerr = layoutOf(m, world); lerr != nil {
			break
		}
	}
	if sharded && opts.Consolidated {
		// Every rank takes part in every gather, or none does.
		if err := agree(pg, lerr); err != nil {
			return nil, nil, nil, err
		}
		for i, m := range st.Modules {
			if m.Sharded == nil {
				continue
			}
			// Its values are checked in the slices, each rank its own.
			fi, err := writeConsolidated(pg, filepath.Join(tmp, m.Key+".safetensors"), m, layouts[i])
			if err != nil {
				return nil, nil, nil, err
			}
			if rank == 0 {
				files = append(files, fi)
			}
		}
	} else if lerr != nil {
		return nil, nil, nil, lerr
	}
	for i, m := range st.Modules {
		if m.Sharded != nil {
			w, err := sliceWriter(filepath.Join(tmp, sliceName(m.Key, rank, world)), m, layouts[i], rank, world)
			if err != nil {
				return nil, nil, nil, err
			}
			// The slices' memory, taken here on the rank's goroutine as
			// sliceWriter takes it, is checked while it is written.
			data, err := sliceData(m, layouts[i])
			if err != nil {
				return nil, nil, nil, err
			}
			writers = append(writers, func() (FileInfo, bool, error) {
				var finite bool
				var scan sync.WaitGroup
				scan.Go(func() { finite = rawFinite(data) })
				fi, err := w()
				scan.Wait()
				return fi, finite, err
			})
			continue
		}
		if rank == 0 {
			writers = append(writers, func() (FileInfo, bool, error) {
				return writeModule(filepath.Join(tmp, m.Key+".safetensors"), m.Tensors)
			})
		}
	}
	var infos []OptimizerInfo
	for _, o := range st.Optimizers {
		info, err := optimizerInfo(o.Key, o.Opt, world)
		if err != nil {
			return nil, nil, nil, err
		}
		infos = append(infos, info)
		if info.Shards == 1 && rank != 0 {
			continue // replicated: rank 0's copy is every rank's
		}
		writers = append(writers, func() (FileInfo, bool, error) {
			fi, err := writeOptimizer(filepath.Join(tmp, shardName(o.Key, rank, info.Shards)), o.Opt)
			return fi, true, err
		})
	}
	written := make([]FileInfo, len(writers))
	finite := make([]bool, len(writers))
	errs := make([]error, len(writers))
	var wg sync.WaitGroup
	for i, w := range writers {
		wg.Go(func() { written[i], finite[i], errs[i] = w() })
	}
	wg.Wait()
	var nonfinite []string
	for i, ok := range finite {
		if !ok && errs[i] == nil {
			nonfinite = append(nonfinite, written[i].Name)
		}
	}
	return append(files, written...), infos, nonfinite, errors.Join(errs...)
}

// commit runs on rank 0 once every rank has reported: with no failure it
// writes the manifest, renames the folder into place, points latest at it
// and removes the checkpoints beyond opts.Keep.
func commit(dir, tmp, final string, step int64, world int, st *State, infos []OptimizerInfo, reports [][]byte, opts SaveOptions) error {
	m := Manifest{Format: Format, Version: 1, Step: step, WorldSize: world, Time: now(),
		Optimizers: infos, State: st.JSON, RNG: make([][]byte, world)}
	for _, mod := range st.Modules {
		if mod.Sharded == nil || opts.Consolidated {
			m.Modules = append(m.Modules, mod.Key)
		}
		if mod.Sharded != nil {
			m.Sharded = append(m.Sharded, ShardedInfo{Key: mod.Key, Shards: world})
			m.Version = 2
		}
	}
	var nonfinite []string
	for r, payload := range reports {
		var rep rankReport
		if err := json.Unmarshal(payload, &rep); err != nil {
			return fmt.Errorf("checkpoint: rank %d's report: %w", r, err)
		}
		if rep.Err != "" {
			if world > 1 && r != 0 {
				return fmt.Errorf("rank %d: %s", r, rep.Err)
			}
			return errors.New(rep.Err)
		}
		m.Files = append(m.Files, rep.Files...)
		m.RNG[r] = rep.RNG
		nonfinite = append(nonfinite, rep.NonFinite...)
	}
	if m.State == nil {
		m.State = map[string]json.RawMessage{}
	}
	// The model is finite only if every rank's part of it is.
	finite := len(nonfinite) == 0
	m.Finite, m.NonFinite = &finite, nonfinite
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: manifest: %w", err)
	}
	if _, err := writeFile(filepath.Join(tmp, ManifestName), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return err
	}
	fileio.SyncDir(tmp)

	// Saving a step that already has a checkpoint (a run resumed before
	// it): the old folder steps aside until the new one is in place.
	old := ""
	if _, err := os.Stat(final); err == nil {
		old = filepath.Join(dir, ".old-"+filepath.Base(final))
		if err := os.Rename(final, old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if old != "" {
			os.Rename(old, final)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	fileio.SyncDir(dir)
	if err := fileio.WriteAtomic("checkpoint", filepath.Join(dir, LatestName), func(f *os.File) error {
		_, err := f.WriteString(filepath.Base(final) + "\n")
		return err
	}); err != nil {
		return err
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return prune(dir, filepath.Base(final), nonfinite, opts)
}

// prune retires the oldest checkpoints beyond opts.Keep, never the one
// named current: each is renamed out of the way at once (a crash then
// leaves only a hidden folder, which the next save removes) and deleted in
// the background, since freeing gigabytes takes a noticeable time (0.3 s
// for GPT-2 124M's 1.5 GB here) that the training need not wait for.
//
// nonfinite are current's files that hold NaN or infinite values. A run
// whose loss has diverged saves such checkpoints one after another, and
// Keep would retire the last good one: so while every checkpoint kept
// would be non-finite, the newest with finite parameters stays beyond
// Keep. latest still names current: it is the newest save, as Latest and
// the recovery from a crash expect, and pointing it back would not help
// an automatic restart, which resumes bit for bit and so diverges again
// at the same step; going back is a choice made with other settings (a
// lower learning rate), so opts.Warn names the checkpoint to go back to,
// and the command that makes latest name it.
func prune(dir, current string, nonfinite []string, opts SaveOptions) error {
	keep := opts.Keep
	if keep <= 0 && len(nonfinite) == 0 {
		return nil
	}
	steps, err := listSteps(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var retire, kept []string // oldest first
	for i, step := range steps {
		name := StepName(step)
		if keep > 0 && i < len(steps)-keep && name != current {
			retire = append(retire, name)
		} else {
			kept = append(kept, name)
		}
	}
	if len(nonfinite) > 0 {
		good, spared := "", false
		for i := len(kept) - 1; i >= 0 && good == ""; i-- {
			if kept[i] != current && finiteAt(filepath.Join(dir, kept[i])) {
				good = kept[i]
			}
		}
		for i := len(retire) - 1; i >= 0 && good == ""; i-- {
			if finiteAt(filepath.Join(dir, retire[i])) {
				good, spared = retire[i], true
				retire = slices.Delete(retire, i, i+1)
			}
		}
		warn(opts, nonfiniteMessage(dir, current, nonfinite, good, spared, keep))
	}
	var retired []string
	for _, name := range retire {
		old := filepath.Join(dir, ".old-"+name)
		if err := os.Rename(filepath.Join(dir, name), old); err != nil {
			return fmt.Errorf("checkpoint: retiring an old checkpoint: %w", err)
		}
		retired = append(retired, old)
	}
	if len(retired) > 0 {
		removing.Add(1)
		go func() {
			defer removing.Done()
			for _, old := range retired {
				os.RemoveAll(old)
			}
		}()
	}
	return nil
}

// finiteAt reports whether the checkpoint at path can be resumed from as
// one with finite parameters: recorded so, or saved before zeroeng
// recorded it. One whose manifest cannot be read cannot.
func finiteAt(path string) bool {
	finite, _, err := ParamsFinite(path)
	return err == nil && finite
}

// nonfiniteMessage says that current holds NaN or infinite values in its
// files nonfinite, and names good, the newest checkpoint with finite
// parameters ("": none), spared when it stays beyond keep.
func nonfiniteMessage(dir, current string, nonfinite []string, good string, spared bool, keep int) string {
	msg := fmt.Sprintf("checkpoint: %s holds NaN or infinite parameters (in %s)", filepath.Join(dir, current), strings.Join(nonfinite, ", "))
	switch {
	case good == "":
		return msg + fmt.Sprintf("; no checkpoint in %s has finite ones", dir)
	case spared:
		msg += fmt.Sprintf("; kept %s, the newest checkpoint with finite ones, beyond keep %d", good, keep)
	default:
		msg += fmt.Sprintf("; %s is the newest checkpoint with finite ones", good)
	}
	latest := filepath.Join(dir, LatestName)
	return msg + fmt.Sprintf(". %s names %s: to resume from %s instead, run: echo %s > %s", latest, current, good, good, shellQuote(latest))
}

// shellQuote quotes s for a POSIX shell, when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,:/@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// warn hands msg to opts.Warn, or to standard error without one.
func warn(opts SaveOptions, msg string) {
	if opts.Warn != nil {
		opts.Warn(msg)
		return
	}
	fmt.Fprintln(os.Stderr, "zeroeng: "+msg)
}

// removing counts the background deletions of retired checkpoints; a
// save waits for them before it looks for leftovers to remove.
var removing sync.WaitGroup

// Finish waits for the deletions of retired checkpoints that saves left
// running in the background; a process calls it before it exits, so that
// none is left half deleted.
func Finish() { removing.Wait() }
