package task

// The size of a stored task object encodes its status, so that a LIST,
// which carries sizes, tells scans, sweeps, the dashboard and `list
// --status` what each task is without a GET per task. Writers pad the JSON
// with trailing newlines (SizePadding) to keep it true. It is a hint for
// cost only: every decision re-reads the object.
//
// The residues, modulo 8:
//
//	pending    0, 4   (a multiple of 4)
//	succeeded  1, 5   (1 modulo 4)
//	running    2
//	dead       3
//	blocked    6
//	canceled   7
//
// Pending takes two residues (and its priority more padding, see
// PriorityBySize below); the others need at most 7 bytes. Succeeded's two residues tell
// apart a task that holds a result (1: inline or stored apart) from one
// that holds none (5), so that the monitor's result TTL finds the results
// to drop without a GET per task (HoldsResultBySize). Odd sizes are
// finished tasks and multiples of 4 pending ones, as before the residues
// were split: objects written before then (whose finished ones are merely
// odd and whose running and blocked ones are 2 modulo 4) still read right
// as finished, pending or neither, but their exact status by size may be
// wrong (an old succeeded task of 3 modulo 8 reads as dead).

// FinishedBySize reports what a task object's size says: odd sizes are
// finished tasks (succeeded, dead, canceled), even sizes are not.
func FinishedBySize(size int64) bool { return size%2 == 1 }

// PendingBySize reports whether a task object's size says pending: a
// multiple of 4 bytes.
func PendingBySize(size int64) bool { return size%4 == 0 }

// HoldsResultBySize reports whether a task object's size says it succeeded
// and may hold a result: 1 modulo 8. (A succeeded object written before
// the residues told results apart may say so wrongly either way.)
func HoldsResultBySize(size int64) bool { return size%8 == 1 }

// StatusBySize returns the status a task object's size says (see the
// residues above); ok is false for a size no task object has (0 or less).
func StatusBySize(size int64) (s Status, ok bool) {
	if size <= 0 {
		return "", false
	}
	switch size % 8 {
	case 0, 4:
		return Pending, true
	case 1, 5:
		return Succeeded, true
	case 2:
		return Running, true
	case 3:
		return Dead, true
	case 6:
		return Blocked, true
	default: // 7
		return Canceled, true
	}
}

// sizeResidue is the residue modulo 8 a task object of status s is padded
// to, and the modulus that residue is taken in (4 for the statuses with two
// residues, whichever is nearer).
func sizeResidue(s Status) (residue, modulus int) {
	switch s {
	case Pending:
		return 0, 4
	case Succeeded:
		return 1, 8
	case Running:
		return 2, 8
	case Dead:
		return 3, 8
	case Blocked:
		return 6, 8
	case Canceled:
		return 7, 8
	}
	return 2, 8 // not a status: the residue of running, which nothing settles by
}

// PaddingOf is how many bytes of padding a task object of n bytes encoding
// t needs: SizePaddingFor its status and priority, and for a succeeded
// task the residue that says whether it holds a result (HoldsResultBySize).
func PaddingOf(n int, t *Task) int {
	if t.Status == Succeeded && !t.HoldsResult() {
		return ((5-n)%8 + 8) % 8
	}
	return SizePaddingFor(n, t.Status, t.Priority)
}

// SizePadding is how many bytes of padding (trailing newlines) a task
// object of n bytes with status s and the default priority needs for its
// size to say s (StatusBySize, FinishedBySize and PendingBySize).
func SizePadding(n int, s Status) int { return SizePaddingFor(n, s, PriorityDefault) }

// SizePaddingFor is SizePadding for a task of priority p: a pending one is
// padded further so that its size also says p (PriorityBySize); the other
// statuses are padded as SizePadding pads them, whatever p.
func SizePaddingFor(n int, s Status, p Priority) int {
	r, mod := sizeResidue(s)
	pad := ((r-n)%mod + mod) % mod
	if s != Pending {
		return pad
	}
	for !priorityCode(int64(n+pad), p) {
		pad += 4
	}
	return pad
}

// The priority of a pending task object by its size: a pending size is a
// multiple of 4, and which eighth of 32 it falls in, (size mod 32) / 8,
// says its priority:
//
//	0, 2   default (size mod 32 is 0, 4, 16 or 20)
//	1      high    (8, 12)
//	3      low     (24, 28)
//
// Modulo 8 every pending size is still 0 or 4, so StatusBySize and the
// coarser hints read as before. A default task takes half the residues,
// so its padding stays at most 11 bytes; a high or low one at most 27. A
// pending object written before priorities existed has a default
// priority but may read as high or low (a quarter of sizes each): the
// priority by size only orders a worker's window, so such a task is
// claimed a little earlier or later, never lost.

// priorityCode reports whether a pending size says priority p.
func priorityCode(size int64, p Priority) bool {
	switch (size % 32) / 8 {
	case 1:
		return p == PriorityHigh
	case 3:
		return p == PriorityLow
	}
	return p != PriorityHigh && p != PriorityLow
}

// PriorityBySize returns the priority a pending task object's size says
// (see above); ok is false for a size that does not say pending, whose
// priority a listing cannot tell.
func PriorityBySize(size int64) (p Priority, ok bool) {
	if size <= 0 || !PendingBySize(size) {
		return PriorityDefault, false
	}
	switch (size % 32) / 8 {
	case 1:
		return PriorityHigh, true
	case 3:
		return PriorityLow, true
	}
	return PriorityDefault, true
}
