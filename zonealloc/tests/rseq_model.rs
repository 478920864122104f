//! An exhaustive check of the per-CPU stacks' restartable sequences
//! (`src/rseq.rs`), of how the fast paths use them (`src/fast.rs`), and of the
//! remote stop (`PcpLocked::stop_stacks` and its `Drop` in `src/pcp.rs`).
//!
//! The sequences are inline assembly that only the kernel makes atomic, so loom
//! and Miri cannot run them. This file models them instead, in plain Rust: a
//! small machine (two CPUs, up to three threads, up to four blocks, stacks of two
//! slots) whose threads execute the sequences one shared-memory access at a
//! time, in the order of the assembly, and a kernel that may preempt, migrate or
//! signal a thread between any two of those accesses, with the rseq rule applied:
//! a thread interrupted between the section's first instruction and its
//! committing store resumes at the abort label, which restarts the sequence
//! (re-reading `cpu_id`). A remote stopper (on a third CPU) runs the steps of
//! `Zone::pcp_lock` + `stop_stacks` + `take_all_stopped` + `resume` + unlock.
//!
//! A depth-first search over every choice (which thread or the stopper takes its
//! next step, which thread migrates or takes a signal), with a set of visited
//! states, reaches every state of a configuration and checks in each one:
//! * every block is in exactly one place: held by exactly one thread (or by the
//!   program that allocated it), on exactly one stack slot below that stack's
//!   committed length, on one CPU's lists, or in the zone's free pool; slots at
//!   or above the length never count, copies a thread made inside a section
//!   count only once the section commits;
//! * a block on a stack has state `Pcp`;
//! * the push counter of each commit word equals the number of `push`es that
//!   committed on that stack;
//! * from the stopper's membarrier until it clears `stopped`, no thread writes
//!   that CPU's stack (word or slots);
//!
//! and in every final state also: of two frees of one block exactly one won the
//! compare-and-swap, each block's state word agrees with its place, and the pops
//! figure that `CpuStacks::pops` derives (pushes + blocks put on by refills -
//! blocks taken off by flushes and stops - length) equals the number of `pop`s
//! that committed on that stack.
//!
//! Preemptions are unbounded (any thread of a CPU may take the next step at
//! any point); each run may also contain up to `MIGRATIONS` migrations and one
//! or two signals (per configuration), and every configuration is finite, so
//! the search ends. Each configuration's test prints the states, transitions
//! and final states it explored, fails with the shortest-found interleaving of
//! any violation, and demands that the behaviours an invariant guards against
//! (a membarrier aborting a section, an abort after a slot store, a full or a
//! stopped stack, ...) really happen in some run (`Cov`).
//!
//! Mutated protocols (the stopper without its membarrier, sequences that do not
//! read `stopped`, a `push` that commits before storing its slot, a kernel that
//! does not restart a preempted section, a stopper that never sets `stopped`)
//! must each make the search find a lost or duplicated block, both with the
//! conservation invariant checked in every state and with it checked in final
//! states only (an outcome, not a transient); the unmutated model must find no
//! violation at all. Run with `--nocapture` to see the shortest interleaving
//! (breadth-first) that shows each mutation's loss.
//!
//! Modelling choices, all of them deliberate:
//! * Instructions that touch only registers or the thread's own stack are folded
//!   into the next instruction that reads or writes shared memory: an abort
//!   between them restarts the sequence exactly as an abort before that shared
//!   access does. The store of the `rseq_cs` pointer (label `2:`, before
//!   `start_ip`) writes only the thread's own rseq area.
//! * Memory is sequentially consistent. On x86-64 the stopper's `stopped` store
//!   is `SeqCst` (a locked instruction) and the membarrier is a full barrier on
//!   the target CPU; threads of one CPU are ordered by the context switch.
//! * There is one stack per CPU (one per-CPU list index) and `lim` equals
//!   `STACK_CAP`, both 2. The ordinary paths (a free or an allocation that does
//!   not use a stack) move a block to or from the zone's free pool in one step,
//!   as they do under the zone lock.
//! * `running[cpu]` records the thread that CPU runs while that thread is inside a
//!   section; when another thread takes a step on that CPU, the CPU has switched,
//!   which preempts the recorded thread (and so aborts it). A preempted thread
//!   aborts on its way back to user space, before it runs another instruction,
//!   so the model aborts it at the switch.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::Instant;

/// CPUs that run threads (the stopper runs on a third one).
const NCPU: usize = 2;
/// Slots per stack: `STACK_CAP`, and the push limit `lim`.
const CAP: usize = 2;
/// Blocks at most.
const NB: usize = 4;
/// Threads at most (besides the stopper).
const NT: usize = 3;
/// No block, no thread, no CPU.
const NONE: u8 = u8::MAX;
/// The stopper, as the holder of a pcp lock.
const STOPPER: u8 = 200;
/// The commit word's layout, as `src/rseq.rs`.
const LEN_MASK: u64 = 0xffff;
const PUSH_SHIFT: u32 = 16;
/// `add {w}, 0x10001`: one more block, one more push.
const PUSH_ONE: u64 = (1 << PUSH_SHIFT) | 1;

// ---------------------------------------------------------------------------
// A small fast hasher (the visited set holds millions of states)
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Mix(u64);

impl Mix {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        // splitmix64's finaliser: every output bit depends on every input bit.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut v = [0u8; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(v));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

// ---------------------------------------------------------------------------
// The machine
// ---------------------------------------------------------------------------

/// A block's state word, as far as the protocol reads it (`frame::Tag`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Tag {
    /// Handed out: a free's compare-and-swap expects this.
    Alloc,
    /// On a stack, on a CPU's lists, or held by a fast path between them.
    Pcp,
    /// In the zone's free pool (the buddy lists).
    Free,
}

/// The block a free names.
#[derive(Clone, Copy, Debug)]
enum Blk {
    /// A block the program holds from the start (several threads may free it).
    Fixed(u8),
    /// The block this thread's last allocation returned.
    Mine,
}

/// One call a thread makes.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `free_fast`, then `free_stack_slow` or the ordinary free.
    Free(Blk),
    /// `alloc_fast`: a pop, `refill_stack` on a miss, or the ordinary allocation.
    Alloc,
    /// The tail of a refill on its own: `k` blocks from the zone, `push_all`
    /// (without the pcp lock, as for a thread that moved to another CPU).
    Refill(u8),
    /// A flush on its own: `pop_many` of up to `k`, the blocks to the zone.
    Flush(u8),
}

/// The sequence a thread is executing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Seq {
    Idle,
    Push,
    Pop,
    PushAll,
    PopMany,
}

impl Seq {
    fn name(self) -> &'static str {
        match self {
            Seq::Idle => "-",
            Seq::Push => "push",
            Seq::Pop => "pop",
            Seq::PushAll => "push_all",
            Seq::PopMany => "pop_many",
        }
    }
}

/// What the last sequence returned, until the call uses it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Res {
    Nothing,
    /// `push` and `pop` committed.
    Ok,
    /// `push` and `pop`: `Miss::Off` (the CPU is stopped).
    Off,
    /// `push`: `Miss::Cpu(c)` (the stack is at its limit).
    Full(u8),
    /// `pop`: `-2`, `Miss::Cpu(c)` (the stack is empty).
    Empty(u8),
    /// `push_all` or `pop_many`: `None`.
    Fail,
    /// `push_all` or `pop_many` committed on CPU `.0` with `.1` blocks.
    Got(u8, u8),
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Cpu {
    /// `CpuStacks::words[p]`: length in the low 16 bits, pushes above.
    word: u64,
    /// `CpuStacks::slots[p]`: stale values above the length stay, as in memory.
    slots: [u8; CAP],
    /// `CpuStacks::stopped`.
    stopped: bool,
    /// The thread this CPU runs while it is inside a section, else `NONE`.
    running: u8,
    /// The holder of this CPU's pcp lock (a thread, `STOPPER` or `NONE`).
    lock: u8,
    /// This CPU's per-CPU lists: how many times each block is on them.
    lists: [u8; NB],
    /// `CpuStacks::inflow` / `outflow`.
    inflow: u8,
    outflow: u8,
    /// Ghost counters: `push`es and `pop`s that committed on this stack.
    pushes_ok: u8,
    pops_ok: u8,
    /// Ghost: the stopper has issued its membarrier and not cleared `stopped`.
    held: bool,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Thread {
    /// The CPU the thread runs on (what the kernel writes to `cpu_id`).
    cpu: u8,
    /// Index of the call in the thread's program and the step inside it.
    op: u8,
    ph: u8,
    /// The sequence being executed and its step (0: the `cpu_id` load at `3:`).
    seq: Seq,
    spc: u8,
    res: Res,
    /// Registers of the sequence: `{c}` (as a CPU number), `{w}`, the loop
    /// index `{j}`, the length a bulk sequence started from, `{got}`.
    c: u8,
    w: u64,
    j: u8,
    base: u8,
    got: u8,
    /// Blocks a bulk sequence moves at most (`Bulk::k` of `pop_many`).
    k: u8,
    /// The block of the call: freed, popped, or kept by a refill.
    b: u8,
    /// The CPU whose pcp lock the call holds or will try.
    lockcpu: u8,
    /// The block the last allocation returned.
    last: u8,
    /// Blocks this thread holds: how many times each.
    own: [u8; NB],
    /// A bulk sequence's buffer: blocks to push (held), or blocks popped (held
    /// once the sequence committed).
    buf: [u8; CAP],
    nbuf: u8,
    /// Copies made inside a section (`{out}`, the `pop_many` buffer before the
    /// commit): not held until the commit.
    regs: [u8; CAP],
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Stopper {
    /// Index of the stop in progress, and the step inside it.
    k: u8,
    sp: u8,
    /// `take_all_stopped`'s `w`, `len`, and its copies of the slots.
    w: u64,
    len: u8,
    i: u8,
    regs: [u8; CAP],
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct World {
    cpu: [Cpu; NCPU],
    tag: [Tag; NB],
    /// The zone's free pool: how many times each block is there.
    pool: [u8; NB],
    /// Blocks the program held from the start and not yet freed.
    ext: [u8; NB],
    /// Ghost: successful `Alloc -> Pcp` compare-and-swaps per block.
    cas_wins: [u8; NB],
    t: [Thread; NT],
    s: Stopper,
    /// What the kernel may still do (bounds the search).
    migrations: u8,
    signals: u8,
    /// Ghost: times a thread, the stopper or a list took an empty slot's
    /// non-block as a block.
    garbage: u8,
}

/// A state as the visited set keeps it: every field of `World`, each in as
/// many bits as its values need (asserted), so the set holds millions of
/// states in a few hundred megabytes. Exact: distinct states have distinct
/// keys (`compact_keys_are_exact` compares with a set of whole states).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key([u64; 7]);

#[derive(Default)]
struct Bits {
    words: [u64; 7],
    at: usize,
}

impl Bits {
    fn put(&mut self, v: u64, width: usize) {
        assert!(v < 1 << width, "{v} does not fit in {width} bits");
        let (i, o) = (self.at / 64, self.at % 64);
        self.words[i] |= v << o;
        if o + width > 64 {
            self.words[i + 1] |= v >> (64 - o);
        }
        self.at += width;
    }
    fn n(&mut self, v: u8, width: usize) {
        self.put(u64::from(v), width);
    }
    fn flag(&mut self, v: bool) {
        self.put(u64::from(v), 1);
    }
    /// A block, thread or CPU number, or `NONE`.
    fn id(&mut self, v: u8) {
        self.put(if v == NONE { 7 } else { u64::from(v) }, 3);
    }
    /// A commit word (or a register copy of one): length and pushes, nothing else.
    fn word(&mut self, w: u64) {
        assert_eq!(w >> PUSH_SHIFT << PUSH_SHIFT | (w & LEN_MASK), w);
        self.put(w & LEN_MASK, 4);
        self.put(w >> PUSH_SHIFT, 4);
    }
}

impl World {
    fn key(&self) -> Key {
        let mut k = Bits::default();
        for c in &self.cpu {
            k.word(c.word);
            c.slots.iter().for_each(|&b| k.id(b));
            k.flag(c.stopped);
            k.flag(c.held);
            k.id(c.running);
            k.id(if c.lock == STOPPER { 6 } else { c.lock });
            c.lists.iter().for_each(|&n| k.n(n, 2));
            for n in [c.inflow, c.outflow, c.pushes_ok, c.pops_ok] {
                k.n(n, 4);
            }
        }
        for b in 0..NB {
            k.n(self.tag[b] as u8, 2);
            k.n(self.pool[b], 2);
            k.n(self.ext[b], 2);
            k.n(self.cas_wins[b], 2);
        }
        for t in &self.t {
            k.n(t.cpu, 1);
            k.n(t.op, 2);
            k.n(t.ph, 4);
            k.n(t.seq as u8, 3);
            k.n(t.spc, 3);
            let (r, a, b) = match t.res {
                Res::Nothing => (0, 0, 0),
                Res::Ok => (1, 0, 0),
                Res::Off => (2, 0, 0),
                Res::Full(c) => (3, c, 0),
                Res::Empty(c) => (4, c, 0),
                Res::Fail => (5, 0, 0),
                Res::Got(c, n) => (6, c, n),
            };
            k.n(r, 3);
            k.n(a, 2);
            k.n(b, 2);
            k.n(t.c, 1);
            k.word(t.w);
            k.n(t.j, 2);
            k.n(t.base, 2);
            k.n(t.got, 2);
            k.n(t.k, 3);
            k.id(t.b);
            k.id(t.lockcpu);
            k.id(t.last);
            t.own.iter().for_each(|&n| k.n(n, 2));
            t.buf.iter().for_each(|&b| k.id(b));
            k.n(t.nbuf, 2);
            t.regs.iter().for_each(|&b| k.id(b));
        }
        let s = &self.s;
        k.n(s.k, 2);
        k.n(s.sp, 3);
        k.word(s.w);
        k.n(s.len, 3);
        k.n(s.i, 2);
        s.regs.iter().for_each(|&b| k.id(b));
        k.n(self.migrations, 2);
        k.n(self.signals, 2);
        k.n(self.garbage, 4);
        Key(k.words)
    }
}

/// One nondeterministic choice.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Event {
    /// Thread `.0` executes its next step on its CPU (switching that CPU to it).
    Run(u8),
    /// The stopper executes its next step.
    Stop,
    /// The kernel moves thread `.0` to the other CPU.
    Migrate(u8),
    /// The kernel delivers a signal to thread `.0`.
    Signal(u8),
}

/// A protocol change the search must catch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mutation {
    None,
    /// `Stacks::stop` without the membarrier.
    NoMembarrier,
    /// The sequences do not load `stopped` (or ignore it).
    NoStoppedCheck,
    /// `push` commits the word, then stores the slot (after its section).
    CommitBeforeSlot,
    /// The kernel does not restart a section when it preempts the thread.
    NoPreemptAbort,
    /// `Stacks::stop` issues the membarrier without setting `stopped`.
    NoStoppedFlag,
}

/// What went wrong.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Lost,
    Duplicated,
    Garbage,
    Overflow,
    ChangedWhileStopped,
    NotPcpOnStack,
    PushCounter,
    PopsFigure,
    RaceWinners,
    WrongState,
    FreedUnheld,
    Stuck,
}

impl Kind {
    /// Whether the search stops following a state that shows it.
    fn fatal(self) -> bool {
        matches!(
            self,
            Kind::Lost | Kind::Duplicated | Kind::Garbage | Kind::Overflow | Kind::FreedUnheld
        )
    }
}

/// Behaviours the unmutated configurations must reach between them, so that
/// no invariant holds only because its threat never happened.
#[derive(Clone, Copy, Debug)]
enum Cov {
    PreemptAbort,
    MigrateAbort,
    SignalAbort,
    MembarrierAbort,
    AbortAfterSlotStore,
    PushOk,
    PushFull,
    PushStopped,
    PopOk,
    PopEmpty,
    PopStopped,
    PushAllOk,
    PushAllStopped,
    PushAllNoRoom,
    PopManyOk,
    PopManyStopped,
    StopTakesBlocks,
    CasLost,
    TrylockFails,
    OrdinaryAlloc,
    OrdinaryFree,
    RefillFromLists,
    FreeFlushes,
}

/// A small configuration.
#[derive(Clone)]
struct Config {
    name: &'static str,
    /// Per thread: its first CPU and its calls.
    threads: Vec<(u8, Vec<Op>)>,
    /// Blocks in play (`< NB`); those in neither `ext` nor `stack0` start free.
    blocks: usize,
    /// Blocks the program holds (state `Alloc`).
    ext: Vec<u8>,
    /// Blocks a refill left on CPU 0's stack (state `Pcp`, counted in).
    stack0: Vec<u8>,
    /// CPUs the stopper stops, one after the other.
    stops: Vec<u8>,
    /// Blocks `refill_stack` takes (`batch << alloc_factor`).
    refill: u8,
    /// How many migrations and signals the kernel may inject in one run.
    migrations: u8,
    signals: u8,
    mutation: Mutation,
    /// Check block conservation in every state (else in final states only).
    every_state: bool,
}

/// Violations found while taking one step or reached in one state.
struct Out {
    bad: Vec<(Kind, String)>,
    log: Option<Vec<String>>,
    /// Coverage: the `Cov` points this step reached.
    cov: u32,
}

impl Out {
    fn quiet() -> Out {
        Out {
            bad: Vec::new(),
            log: None,
            cov: 0,
        }
    }
    fn hit(&mut self, c: Cov) {
        self.cov |= 1 << c as u32;
    }
    fn note(&mut self, f: impl FnOnce() -> String) {
        if let Some(l) = &mut self.log {
            l.push(f());
        }
    }
}

/// A violation, with the choices that lead to it.
#[derive(Clone, Debug)]
struct Found {
    msg: String,
    path: Vec<Event>,
}

#[derive(Debug)]
struct Report {
    name: &'static str,
    states: usize,
    transitions: usize,
    finals: usize,
    cov: u32,
    secs: f64,
    found: BTreeMap<Kind, Found>,
}

struct Model {
    cfg: Config,
    progs: Vec<Vec<Op>>,
    /// Blocks that more than one `Free(Fixed)` names.
    raced: Vec<u8>,
}

fn len_of(word: u64) -> usize {
    (word & LEN_MASK) as usize
}

impl Model {
    fn new(cfg: Config) -> Model {
        assert!(cfg.threads.len() <= NT && cfg.blocks <= NB && cfg.stack0.len() <= CAP);
        assert!((1..=CAP as u8 + 1).contains(&cfg.refill));
        let progs: Vec<Vec<Op>> = cfg.threads.iter().map(|(_, p)| p.clone()).collect();
        let mut raced = Vec::new();
        for b in 0..cfg.blocks as u8 {
            let n = progs
                .iter()
                .flatten()
                .filter(|op| matches!(op, Op::Free(Blk::Fixed(x)) if *x == b))
                .count();
            if n > 1 {
                raced.push(b);
            }
        }
        Model { cfg, progs, raced }
    }

    fn init(&self) -> World {
        let idle = Thread {
            cpu: 0,
            op: 0,
            ph: 0,
            seq: Seq::Idle,
            spc: 0,
            res: Res::Nothing,
            c: 0,
            w: 0,
            j: 0,
            base: 0,
            got: 0,
            k: 0,
            b: NONE,
            lockcpu: NONE,
            last: NONE,
            own: [0; NB],
            buf: [NONE; CAP],
            nbuf: 0,
            regs: [NONE; CAP],
        };
        let cpu = Cpu {
            word: 0,
            slots: [NONE; CAP],
            stopped: false,
            running: NONE,
            lock: NONE,
            lists: [0; NB],
            inflow: 0,
            outflow: 0,
            pushes_ok: 0,
            pops_ok: 0,
            held: false,
        };
        let mut w = World {
            cpu: [cpu.clone(), cpu],
            tag: [Tag::Free; NB],
            pool: [0; NB],
            ext: [0; NB],
            cas_wins: [0; NB],
            t: [idle.clone(), idle.clone(), idle],
            s: Stopper {
                k: 0,
                sp: 0,
                w: 0,
                len: 0,
                i: 0,
                regs: [NONE; CAP],
            },
            migrations: self.cfg.migrations,
            signals: self.cfg.signals,
            garbage: 0,
        };
        for b in 0..self.cfg.blocks {
            w.pool[b] = 1;
        }
        for &b in &self.cfg.ext {
            w.pool[b as usize] = 0;
            w.ext[b as usize] = 1;
            w.tag[b as usize] = Tag::Alloc;
        }
        for (i, &b) in self.cfg.stack0.iter().enumerate() {
            w.pool[b as usize] = 0;
            w.tag[b as usize] = Tag::Pcp;
            w.cpu[0].slots[i] = b;
        }
        w.cpu[0].word = self.cfg.stack0.len() as u64;
        w.cpu[0].inflow = self.cfg.stack0.len() as u8;
        for ti in 0..NT {
            if ti < self.progs.len() {
                self.begin(&mut w, ti);
                w.t[ti].cpu = self.cfg.threads[ti].0;
            }
        }
        w
    }

    fn nthreads(&self) -> usize {
        self.progs.len()
    }

    fn done(&self, w: &World, ti: usize) -> bool {
        ti >= self.progs.len() || w.t[ti].op as usize >= self.progs[ti].len()
    }

    fn stopper_done(&self, w: &World) -> bool {
        w.s.k as usize >= self.cfg.stops.len()
    }

    fn is_final(&self, w: &World) -> bool {
        self.stopper_done(w) && (0..self.nthreads()).all(|ti| self.done(w, ti))
    }

    /// Between the section's first instruction (`3:`) and its commit.
    fn in_section(&self, t: &Thread) -> bool {
        t.seq != Seq::Idle
            && t.spc > 0
            && !(self.cfg.mutation == Mutation::CommitBeforeSlot
                && t.seq == Seq::Push
                && t.spc == 4)
    }

    fn enabled(&self, w: &World) -> Vec<Event> {
        let mut v = Vec::with_capacity(3 * NT + 1);
        for ti in 0..self.nthreads() {
            if self.done(w, ti) {
                continue;
            }
            v.push(Event::Run(ti as u8));
            if w.migrations > 0 {
                v.push(Event::Migrate(ti as u8));
            }
            if w.signals > 0 && self.in_section(&w.t[ti]) {
                v.push(Event::Signal(ti as u8));
            }
        }
        if !self.stopper_done(w) {
            let x = self.cfg.stops[w.s.k as usize] as usize;
            // `pcp_lock` waits for the lock.
            if w.s.sp != 0 || w.cpu[x].lock == NONE {
                v.push(Event::Stop);
            }
        }
        v
    }

    // -----------------------------------------------------------------------
    // Ownership moves
    // -----------------------------------------------------------------------

    fn hold(w: &mut World, ti: usize, b: u8) {
        if (b as usize) < NB {
            w.t[ti].own[b as usize] += 1;
        } else {
            w.garbage += 1;
        }
    }

    fn unhold(w: &mut World, ti: usize, b: u8) {
        if (b as usize) < NB {
            w.t[ti].own[b as usize] -= 1;
        }
    }

    /// Into the zone's free pool (the ordinary free, `free_batch_locked`).
    fn to_pool(w: &mut World, ti: usize, b: u8) {
        if (b as usize) < NB {
            w.t[ti].own[b as usize] -= 1;
            w.pool[b as usize] += 1;
            w.tag[b as usize] = Tag::Free;
        }
    }

    /// The lowest free block of the pool, taken with state `tag`.
    fn take_free(&self, w: &mut World, ti: usize, tag: Tag) -> Option<u8> {
        let b = (0..self.cfg.blocks).find(|&b| w.pool[b] > 0)?;
        w.pool[b] -= 1;
        w.tag[b] = tag;
        w.t[ti].own[b] += 1;
        Some(b as u8)
    }

    /// A thread writes CPU `c`'s stack (a slot or the word).
    fn wrote(w: &World, ti: usize, c: usize, what: &str, out: &mut Out) {
        if w.cpu[c].held {
            out.bad.push((
                Kind::ChangedWhileStopped,
                format!("T{ti} wrote cpu{c}'s {what} while the stopper owns that stack"),
            ));
        }
    }

    fn abort(w: &mut World, ti: usize, why: Cov, out: &mut Out) {
        out.hit(why);
        let t = &mut w.t[ti];
        if (t.seq == Seq::Push && t.spc >= 4) || (t.seq == Seq::PushAll && (t.spc > 3 || t.j > 0)) {
            out.hit(Cov::AbortAfterSlotStore);
        }
        t.spc = 0;
        t.c = 0;
        t.w = 0;
        t.j = 0;
        t.base = 0;
        t.got = 0;
        t.regs = [NONE; CAP];
    }

    fn end(t: &mut Thread, r: Res) {
        t.seq = Seq::Idle;
        t.spc = 0;
        t.res = r;
        t.c = 0;
        t.w = 0;
        t.j = 0;
        t.base = 0;
        t.got = 0;
        t.regs = [NONE; CAP];
    }

    // -----------------------------------------------------------------------
    // The calls
    // -----------------------------------------------------------------------

    /// Sets up call `t.op` (its first step may be a sequence's).
    fn begin_op(&self, t: &mut Thread) {
        t.ph = 0;
        t.res = Res::Nothing;
        t.b = NONE;
        t.lockcpu = NONE;
        t.k = 0;
        t.nbuf = 0;
        t.buf = [NONE; CAP];
    }

    fn begin(&self, w: &mut World, ti: usize) {
        let op = self.progs[ti].get(w.t[ti].op as usize).copied();
        let t = &mut w.t[ti];
        self.begin_op(t);
        match op {
            Some(Op::Alloc) => {
                // `alloc_fast`: `z.stacks.pop(p)`.
                t.seq = Seq::Pop;
                t.ph = 1;
            }
            Some(Op::Flush(k)) => {
                t.k = k;
                t.seq = Seq::PopMany;
                t.ph = 1;
            }
            Some(_) => {}
            None => {
                // Done: a canonical form, so finished threads do not split states.
                t.cpu = 0;
                t.last = NONE;
            }
        }
    }

    fn finish(&self, w: &mut World, ti: usize) {
        w.t[ti].op += 1;
        self.begin(w, ti);
    }

    fn apply(&self, w: &mut World, ev: Event, out: &mut Out) {
        match ev {
            Event::Run(ti) => self.run(w, ti as usize, out),
            Event::Stop => self.stopper_step(w, out),
            Event::Migrate(ti) => {
                let ti = ti as usize;
                let x = w.t[ti].cpu as usize;
                let y = (x + 1) % NCPU;
                if self.in_section(&w.t[ti]) {
                    Self::abort(w, ti, Cov::MigrateAbort, out);
                    out.note(|| {
                        format!("T{ti} migrates cpu{x} -> cpu{y} inside its section: abort")
                    });
                } else {
                    out.note(|| format!("T{ti} migrates cpu{x} -> cpu{y}"));
                }
                if w.cpu[x].running == ti as u8 {
                    w.cpu[x].running = NONE;
                }
                w.t[ti].cpu = y as u8;
                w.migrations -= 1;
            }
            Event::Signal(ti) => {
                let ti = ti as usize;
                Self::abort(w, ti, Cov::SignalAbort, out);
                let x = w.t[ti].cpu as usize;
                if w.cpu[x].running == ti as u8 {
                    w.cpu[x].running = NONE;
                }
                w.signals -= 1;
                out.note(|| format!("T{ti} takes a signal inside its section: abort"));
            }
        }
    }

    fn run(&self, w: &mut World, ti: usize, out: &mut Out) {
        let x = w.t[ti].cpu as usize;
        let r = w.cpu[x].running;
        if r != NONE && r as usize != ti {
            // The CPU switches from `r` (inside its section) to `ti`.
            if self.cfg.mutation == Mutation::NoPreemptAbort {
                out.note(|| format!("cpu{x} preempts T{r} inside its section (no abort)"));
            } else {
                Self::abort(w, r as usize, Cov::PreemptAbort, out);
                out.note(|| format!("cpu{x} preempts T{r} inside its section: abort"));
            }
        }
        if w.t[ti].seq == Seq::Idle {
            self.op_step(w, ti, out);
        } else {
            self.seq_step(w, ti, out);
            if w.t[ti].seq == Seq::Idle {
                self.after_seq(w, ti);
            }
        }
        w.cpu[x].running = if self.in_section(&w.t[ti]) {
            ti as u8
        } else {
            NONE
        };
    }

    /// One instruction of the sequence thread `ti` executes. Each arm names the
    /// lines of the `asm!` block in `src/rseq.rs` it stands for.
    fn seq_step(&self, w: &mut World, ti: usize, out: &mut Out) {
        let m = self.cfg.mutation;
        let checks_stopped = m != Mutation::NoStoppedCheck;
        let seq = w.t[ti].seq;
        let spc = w.t[ti].spc;
        let c = w.t[ti].c as usize;
        if spc == 0 {
            // `3: mov {c:e}, dword ptr [{rs} + 4]` (then `cmp {c}, {n}` / `jae 7f`:
            // every CPU of the model has stacks, and `imul`/`add` form the pointer).
            let cpu = w.t[ti].cpu;
            w.t[ti].c = cpu;
            w.t[ti].spc = 1;
            out.note(|| format!("T{ti} {}: reads cpu_id = {cpu}", seq.name()));
            return;
        }
        if spc == 1 {
            // `cmp dword ptr [{c}], 0` / `jne 7f` (every sequence: a stopped CPU
            // is `Miss::Off`, `None`).
            let stopped = w.cpu[c].stopped;
            out.note(|| format!("T{ti} {}: reads cpu{c}.stopped = {stopped}", seq.name()));
            if stopped && checks_stopped {
                let (r, cov) = match seq {
                    Seq::Push => (Res::Off, Cov::PushStopped),
                    Seq::Pop => (Res::Off, Cov::PopStopped),
                    Seq::PushAll => (Res::Fail, Cov::PushAllStopped),
                    _ => (Res::Fail, Cov::PopManyStopped),
                };
                out.hit(cov);
                Self::end(&mut w.t[ti], r);
            } else {
                w.t[ti].spc = 2;
            }
            return;
        }
        match seq {
            Seq::Idle => unreachable!(),
            Seq::Push => self.push_step(w, ti, out),
            Seq::Pop => match spc {
                2 => {
                    // `mov {w}, qword ptr [{c} + {p}*8 + {words}]`, `test {w:x}, {w:x}`,
                    // `jz 6f`.
                    let word = w.cpu[c].word;
                    w.t[ti].w = word;
                    out.note(|| format!("T{ti} pop: reads cpu{c}.len = {}", len_of(word)));
                    if len_of(word) == 0 {
                        out.hit(Cov::PopEmpty);
                        Self::end(&mut w.t[ti], Res::Empty(c as u8));
                    } else {
                        w.t[ti].spc = 3;
                    }
                }
                3 => {
                    // `sub {w}, 1`, `movzx {t:e}, {w:x}`, `add {t}, {pcap}`,
                    // `mov {out:e}, dword ptr [{c} + {t}*4 + {slots}]`.
                    let top = len_of(w.t[ti].w) - 1;
                    if top >= CAP {
                        out.bad
                            .push((Kind::Overflow, format!("T{ti} pop: cpu{c}.len > CAP")));
                        return;
                    }
                    let b = w.cpu[c].slots[top];
                    w.t[ti].regs[0] = b;
                    w.t[ti].spc = 4;
                    out.note(|| format!("T{ti} pop: reads cpu{c}.slot[{top}] = {}", blk(b)));
                }
                _ => {
                    // `mov qword ptr [{c} + {p}*8 + {words}], {w}`: the commit.
                    Self::wrote(w, ti, c, "word", out);
                    let nw = w.t[ti].w - 1;
                    w.cpu[c].word = nw;
                    w.cpu[c].pops_ok += 1;
                    out.hit(Cov::PopOk);
                    let b = w.t[ti].regs[0];
                    Self::hold(w, ti, b);
                    w.t[ti].b = b;
                    Self::end(&mut w.t[ti], Res::Ok);
                    out.note(|| {
                        format!(
                            "T{ti} pop: COMMIT cpu{c}.len = {} (takes {})",
                            len_of(nw),
                            blk(b)
                        )
                    });
                }
            },
            Seq::PushAll => {
                let k = w.t[ti].nbuf as usize;
                match spc {
                    2 => {
                        // `mov {w}, qword ptr [{c} + {t}]`, `movzx`, `add {j}, [{s} + 40]`,
                        // `cmp {j}, {cap}`, `ja 7f`.
                        let word = w.cpu[c].word;
                        let len = len_of(word);
                        out.note(|| format!("T{ti} push_all: reads cpu{c}.len = {len}"));
                        if len + k > CAP {
                            out.hit(Cov::PushAllNoRoom);
                            Self::end(&mut w.t[ti], Res::Fail);
                        } else {
                            let t = &mut w.t[ti];
                            t.w = word;
                            t.base = len as u8;
                            t.j = 0;
                            t.spc = 3;
                        }
                    }
                    3 => {
                        // `22:` loop: `mov {w:e}, dword ptr [{e} + {j}*4]` (own buffer),
                        // `mov dword ptr [{t} + {j}*4], {w:e}`, `add {j}, 1`.
                        let j = w.t[ti].j as usize;
                        let at = w.t[ti].base as usize + j;
                        let b = w.t[ti].buf[j];
                        Self::wrote(w, ti, c, "slot", out);
                        w.cpu[c].slots[at] = b;
                        w.t[ti].j += 1;
                        if j + 1 == k {
                            w.t[ti].spc = 4;
                        }
                        out.note(|| {
                            format!("T{ti} push_all: stores cpu{c}.slot[{at}] = {}", blk(b))
                        });
                    }
                    4 => {
                        // `23:` `mov {w}, qword ptr [{c} + {t}]`: the word again.
                        let word = w.cpu[c].word;
                        w.t[ti].w = word;
                        w.t[ti].spc = 5;
                        out.note(|| {
                            format!("T{ti} push_all: reads cpu{c}.len = {} again", len_of(word))
                        });
                    }
                    _ => {
                        // `add {w}, [{s} + 40]`, `mov qword ptr [{c} + {t}], {w}`: the commit.
                        Self::wrote(w, ti, c, "word", out);
                        let nw = w.t[ti].w + k as u64;
                        w.cpu[c].word = nw;
                        if len_of(nw) > CAP {
                            out.bad.push((
                                Kind::Overflow,
                                format!("cpu{c}.len = {} > CAP", len_of(nw)),
                            ));
                        }
                        for j in 0..k {
                            let b = w.t[ti].buf[j];
                            Self::unhold(w, ti, b);
                        }
                        out.hit(Cov::PushAllOk);
                        Self::end(&mut w.t[ti], Res::Got(c as u8, k as u8));
                        out.note(|| format!("T{ti} push_all: COMMIT cpu{c}.len = {}", len_of(nw)));
                    }
                }
            }
            Seq::PopMany => match spc {
                2 => {
                    // `mov {w}, qword ptr [{c} + {t}]`, `movzx`, `cmp {t}, {j}`,
                    // `cmovb {j}, {t}`, `sub {t}, {j}`, `mov {got}, {j}`.
                    let word = w.cpu[c].word;
                    let len = len_of(word);
                    let t = &mut w.t[ti];
                    let j = (t.k as usize).min(len);
                    t.w = word;
                    t.j = j as u8;
                    t.got = j as u8;
                    t.base = (len - j) as u8;
                    t.spc = if j > 0 { 3 } else { 4 };
                    out.note(|| format!("T{ti} pop_many: reads cpu{c}.len = {len}, takes {j}"));
                    if len > CAP {
                        out.bad
                            .push((Kind::Overflow, format!("cpu{c}.len = {len} > CAP")));
                    }
                }
                3 => {
                    // `22:` loop: `sub {j}, 1`, `mov {w:e}, dword ptr [{t} + {j}*4]`,
                    // `mov dword ptr [{e} + {j}*4], {w:e}` (into the caller's buffer).
                    let t = &mut w.t[ti];
                    t.j -= 1;
                    let j = t.j as usize;
                    let at = t.base as usize + j;
                    let b = w.cpu[c].slots[at];
                    let t = &mut w.t[ti];
                    t.regs[j] = b;
                    if j == 0 {
                        t.spc = 4;
                    }
                    out.note(|| format!("T{ti} pop_many: reads cpu{c}.slot[{at}] = {}", blk(b)));
                }
                4 => {
                    // `23:` `mov {w}, qword ptr [{c} + {t}]`: the word again.
                    let word = w.cpu[c].word;
                    w.t[ti].w = word;
                    w.t[ti].spc = 5;
                    out.note(|| {
                        format!("T{ti} pop_many: reads cpu{c}.len = {} again", len_of(word))
                    });
                }
                _ => {
                    // `sub {w}, {got}`, `mov qword ptr [{c} + {t}], {w}`: the commit.
                    Self::wrote(w, ti, c, "word", out);
                    let got = w.t[ti].got as usize;
                    let nw = w.t[ti].w.wrapping_sub(got as u64);
                    w.cpu[c].word = nw;
                    if len_of(nw) > CAP || nw >> PUSH_SHIFT != w.t[ti].w >> PUSH_SHIFT {
                        out.bad.push((
                            Kind::Overflow,
                            format!("T{ti} pop_many: cpu{c}.len wraps below 0"),
                        ));
                    }
                    for j in 0..got {
                        let b = w.t[ti].regs[j];
                        Self::hold(w, ti, b);
                        w.t[ti].buf[j] = b;
                    }
                    w.t[ti].nbuf = got as u8;
                    if got > 0 {
                        out.hit(Cov::PopManyOk);
                    }
                    Self::end(&mut w.t[ti], Res::Got(c as u8, got as u8));
                    out.note(|| {
                        format!(
                            "T{ti} pop_many: COMMIT cpu{c}.len = {} (took {got})",
                            len_of(nw)
                        )
                    });
                }
            },
        }
    }

    /// `push`, after the `stopped` check: the length against `lim`, the slot
    /// store, the commit (swapped by `Mutation::CommitBeforeSlot`).
    fn push_step(&self, w: &mut World, ti: usize, out: &mut Out) {
        let c = w.t[ti].c as usize;
        let spc = w.t[ti].spc;
        let swapped = self.cfg.mutation == Mutation::CommitBeforeSlot;
        match spc {
            2 => {
                // `mov {w}, qword ptr [{c} + {p}*8 + {words}]`, `movzx {t:e}, {w:x}`,
                // `cmp {t:e}, dword ptr [{c} + {p}*4 + {lim}]`, `jae 6f`.
                let word = w.cpu[c].word;
                out.note(|| format!("T{ti} push: reads cpu{c}.len = {}", len_of(word)));
                if len_of(word) >= CAP {
                    out.hit(Cov::PushFull);
                    Self::end(&mut w.t[ti], Res::Full(c as u8));
                } else {
                    w.t[ti].w = word;
                    w.t[ti].spc = 3;
                }
            }
            3 if !swapped => self.push_slot(w, ti, out, 4),
            3 => self.push_commit(w, ti, out, 4),
            _ if !swapped => {
                self.push_commit(w, ti, out, 5);
                Self::end(&mut w.t[ti], Res::Ok);
            }
            _ => {
                // After the commit: outside the section, nothing restarts it.
                self.push_slot(w, ti, out, 5);
                Self::end(&mut w.t[ti], Res::Ok);
            }
        }
    }

    /// `add {t}, {pcap}`, `mov dword ptr [{c} + {t}*4 + {slots}], {idx:e}`.
    fn push_slot(&self, w: &mut World, ti: usize, out: &mut Out, next: u8) {
        let c = w.t[ti].c as usize;
        let at = len_of(w.t[ti].w);
        let b = w.t[ti].b;
        Self::wrote(w, ti, c, "slot", out);
        if at < CAP {
            w.cpu[c].slots[at] = b;
        } else {
            out.bad
                .push((Kind::Overflow, format!("T{ti} push: slot {at} >= CAP")));
        }
        w.t[ti].spc = next;
        out.note(|| format!("T{ti} push: stores cpu{c}.slot[{at}] = {}", blk(b)));
    }

    /// `add {w}, 0x10001`, `mov qword ptr [{c} + {p}*8 + {words}], {w}`: the commit.
    fn push_commit(&self, w: &mut World, ti: usize, out: &mut Out, next: u8) {
        let c = w.t[ti].c as usize;
        Self::wrote(w, ti, c, "word", out);
        let nw = w.t[ti].w + PUSH_ONE;
        w.cpu[c].word = nw;
        w.cpu[c].pushes_ok += 1;
        out.hit(Cov::PushOk);
        let b = w.t[ti].b;
        Self::unhold(w, ti, b);
        w.t[ti].spc = next;
        out.note(|| {
            format!(
                "T{ti} push: COMMIT cpu{c}.len = {} ({} pushed)",
                len_of(nw),
                blk(b)
            )
        });
    }

    /// What the call does with a sequence's result: local decisions only (the
    /// `match` on `out`/`st`/`got` after each `asm!` block and in `fast.rs`).
    fn after_seq(&self, w: &mut World, ti: usize) {
        let op = self.progs[ti][w.t[ti].op as usize];
        let res = w.t[ti].res;
        match (op, w.t[ti].ph, res) {
            (Op::Free(_), 2, Res::Ok) => self.finish(w, ti),
            (Op::Free(_), 2, Res::Off) => w.t[ti].ph = 10,
            (Op::Free(_), 2, Res::Full(c)) => {
                w.t[ti].lockcpu = c;
                w.t[ti].ph = 3;
            }
            (Op::Free(_), 4, Res::Got(_, n)) if n > 0 => w.t[ti].ph = 5,
            (Op::Free(_), 4, _) => w.t[ti].ph = 6,
            (Op::Alloc, 1, Res::Ok) => w.t[ti].ph = 2,
            (Op::Alloc, 1, Res::Off) => w.t[ti].ph = 10,
            (Op::Alloc, 1, Res::Empty(c)) => {
                w.t[ti].lockcpu = c;
                w.t[ti].ph = 4;
            }
            (Op::Alloc, 6, Res::Got(..)) => w.t[ti].ph = 11,
            (Op::Alloc, 6, _) => w.t[ti].ph = 9,
            (Op::Refill(_), 1, Res::Got(..)) => w.t[ti].ph = 2,
            (Op::Refill(_), 1, _) => w.t[ti].ph = 3,
            (Op::Flush(_), 1, Res::Got(_, n)) if n > 0 => w.t[ti].ph = 2,
            (Op::Flush(_), 1, _) => self.finish(w, ti),
            (op, ph, res) => panic!("T{ti} {op:?} phase {ph}: unexpected {res:?}"),
        }
    }

    /// One step of a call outside the sequences: a shared access of
    /// `free_fast`, `free_stack_slow`, `alloc_fast`, `refill_stack` or the
    /// ordinary paths.
    fn op_step(&self, w: &mut World, ti: usize, out: &mut Out) {
        let op = self.progs[ti][w.t[ti].op as usize];
        let ph = w.t[ti].ph;
        match (op, ph) {
            (Op::Free(which), 0) => {
                // `free_fast`: `let w = z.frames.word(idx)`, `w.tag() != Tag::Alloc`.
                let b = match which {
                    Blk::Fixed(b) => b,
                    Blk::Mine => w.t[ti].last,
                };
                if b == NONE {
                    self.finish(w, ti);
                    return;
                }
                let tag = w.tag[b as usize];
                out.note(|| format!("T{ti} free: reads {}'s state = {tag:?}", blk(b)));
                w.t[ti].b = b;
                if tag == Tag::Alloc {
                    w.t[ti].ph = 1;
                } else {
                    // The ordinary path refuses a block that is not allocated.
                    out.hit(Cov::CasLost);
                    self.finish(w, ti);
                }
            }
            (Op::Free(_), 1) => {
                // `z.frames.cas_word(idx, w, Word::pcp(order, 0))`.
                let b = w.t[ti].b as usize;
                if w.tag[b] != Tag::Alloc {
                    out.note(|| format!("T{ti} free: CAS on {} fails", blk(b as u8)));
                    out.hit(Cov::CasLost);
                    self.finish(w, ti);
                    return;
                }
                w.tag[b] = Tag::Pcp;
                w.cas_wins[b] += 1;
                if w.t[ti].own[b] == 0 {
                    if w.ext[b] > 0 {
                        w.ext[b] -= 1;
                        w.t[ti].own[b] += 1;
                    } else {
                        out.bad.push((
                            Kind::FreedUnheld,
                            format!("T{ti} freed {} that nobody holds", blk(b as u8)),
                        ));
                    }
                }
                out.note(|| format!("T{ti} free: CAS {} Alloc -> Pcp", blk(b as u8)));
                // `z.stacks.push(p, idx)`.
                w.t[ti].seq = Seq::Push;
                w.t[ti].ph = 2;
            }
            (Op::Free(_), 3) => {
                // `free_stack_slow`: `z.pcp_trylock(cpu)`, then `cs.len(p)` for `want`
                // (lim 2, batch 1: keep 1, want = max(len - 1, 1)).
                let c = w.t[ti].lockcpu as usize;
                if w.cpu[c].lock != NONE {
                    out.note(|| format!("T{ti} free: trylock cpu{c} fails"));
                    out.hit(Cov::TrylockFails);
                    w.t[ti].lockcpu = NONE;
                    w.t[ti].ph = 10;
                    return;
                }
                w.cpu[c].lock = ti as u8;
                let len = len_of(w.cpu[c].word);
                let t = &mut w.t[ti];
                t.k = len.saturating_sub(1).max(1) as u8;
                t.seq = Seq::PopMany;
                t.ph = 4;
                let k = t.k;
                out.note(|| format!("T{ti} free: locks cpu{c}, flushes up to {k}"));
            }
            (Op::Free(_), 5) | (Op::Flush(_), 2) => {
                // `cs.count_out(p, n)`.
                if let Res::Got(c, n) = w.t[ti].res {
                    if matches!(op, Op::Free(_)) {
                        out.hit(Cov::FreeFlushes);
                    }
                    w.cpu[c as usize].outflow += n;
                    out.note(|| format!("T{ti}: counts {n} out of cpu{c}"));
                }
                w.t[ti].res = Res::Nothing;
                w.t[ti].ph += 1;
            }
            (Op::Free(_), 6) => {
                // `z.lock().free_batch_locked(&pfns[..=n], order)`.
                for j in 0..w.t[ti].nbuf as usize {
                    let b = w.t[ti].buf[j];
                    Self::to_pool(w, ti, b);
                }
                let b = w.t[ti].b;
                Self::to_pool(w, ti, b);
                let t = &mut w.t[ti];
                t.nbuf = 0;
                t.buf = [NONE; CAP];
                t.res = Res::Nothing;
                t.ph = 7;
                out.note(|| format!("T{ti} free: flushed blocks and {} to the zone", blk(b)));
            }
            (Op::Free(_), 7) | (Op::Alloc, 7) | (Op::Alloc, 8) => {
                // `drop(pcp)`.
                let c = w.t[ti].lockcpu as usize;
                w.cpu[c].lock = NONE;
                w.t[ti].lockcpu = NONE;
                out.note(|| format!("T{ti}: unlocks cpu{c}"));
                match (op, ph) {
                    (Op::Alloc, 7) => w.t[ti].ph = 2,
                    (Op::Alloc, _) => w.t[ti].ph = 10,
                    _ => self.finish(w, ti),
                }
            }
            (Op::Free(_), 10) => {
                // `set_word(frozen)`, `free_frozen`: the ordinary free.
                let b = w.t[ti].b;
                Self::to_pool(w, ti, b);
                out.note(|| format!("T{ti} free: {} to the zone (ordinary path)", blk(b)));
                out.hit(Cov::OrdinaryFree);
                self.finish(w, ti);
            }
            (Op::Alloc, 2) => {
                // `prep_new_page`: the block's state word becomes `Alloc`.
                let b = w.t[ti].b;
                if (b as usize) < NB {
                    w.tag[b as usize] = Tag::Alloc;
                    w.t[ti].last = b;
                } else {
                    w.t[ti].last = NONE;
                }
                out.note(|| format!("T{ti} alloc: {} Pcp -> Alloc", blk(b)));
                self.finish(w, ti);
            }
            (Op::Alloc, 4) => {
                // `refill_stack`: `z.pcp_trylock(cpu % z.pcp.len())?`.
                let c = w.t[ti].lockcpu as usize;
                if w.cpu[c].lock != NONE {
                    out.note(|| format!("T{ti} alloc: trylock cpu{c} fails"));
                    out.hit(Cov::TrylockFails);
                    w.t[ti].lockcpu = NONE;
                    w.t[ti].ph = 10;
                } else {
                    w.cpu[c].lock = ti as u8;
                    w.t[ti].ph = 5;
                    out.note(|| format!("T{ti} alloc: locks cpu{c}"));
                }
            }
            (Op::Alloc, 5) => {
                // `pcp.take_listed` (the CPU's lists first), then `rmqueue_bulk`
                // under the zone lock, every block's word set to `Pcp`.
                let c = w.t[ti].lockcpu as usize;
                let n = self.cfg.refill as usize;
                let mut got = Vec::new();
                for b in 0..self.cfg.blocks {
                    while got.len() < n && w.cpu[c].lists[b] > 0 {
                        w.cpu[c].lists[b] -= 1;
                        out.hit(Cov::RefillFromLists);
                        w.t[ti].own[b] += 1;
                        w.tag[b] = Tag::Pcp;
                        got.push(b as u8);
                    }
                }
                while got.len() < n {
                    match self.take_free(w, ti, Tag::Pcp) {
                        Some(b) => got.push(b),
                        None => break,
                    }
                }
                out.note(|| format!("T{ti} alloc: refill takes {got:?}"));
                let t = &mut w.t[ti];
                match got.split_last() {
                    None => t.ph = 8,
                    Some((&mine, rest)) => {
                        t.b = mine;
                        t.nbuf = rest.len() as u8;
                        t.buf[..rest.len()].copy_from_slice(rest);
                        if rest.is_empty() {
                            t.ph = 7;
                        } else {
                            // `z.stacks.push_all(p, rest)`.
                            t.seq = Seq::PushAll;
                            t.ph = 6;
                        }
                    }
                }
            }
            (Op::Alloc, 11) | (Op::Refill(_), 2) => {
                // `cs.count_in(p, rest.len())`.
                if let Res::Got(c, n) = w.t[ti].res {
                    w.cpu[c as usize].inflow += n;
                    out.note(|| format!("T{ti}: counts {n} into cpu{c}"));
                }
                let t = &mut w.t[ti];
                t.res = Res::Nothing;
                t.nbuf = 0;
                t.buf = [NONE; CAP];
                if matches!(op, Op::Alloc) {
                    t.ph = 7;
                } else {
                    self.finish(w, ti);
                }
            }
            (Op::Alloc, 9) | (Op::Refill(_), 3) | (Op::Flush(_), 3) => {
                // `free_batch_locked`: a failed refill's rest, or a flush's blocks.
                for j in 0..w.t[ti].nbuf as usize {
                    let b = w.t[ti].buf[j];
                    Self::to_pool(w, ti, b);
                }
                out.note(|| format!("T{ti}: {} blocks to the zone", w.t[ti].nbuf));
                let t = &mut w.t[ti];
                t.res = Res::Nothing;
                t.nbuf = 0;
                t.buf = [NONE; CAP];
                if matches!(op, Op::Alloc) {
                    t.ph = 7;
                } else {
                    self.finish(w, ti);
                }
            }
            (Op::Alloc, 10) => {
                // The ordinary allocation: a block from the zone, or failure.
                let b = self.take_free(w, ti, Tag::Alloc).unwrap_or(NONE);
                out.hit(Cov::OrdinaryAlloc);
                w.t[ti].last = b;
                out.note(|| format!("T{ti} alloc: ordinary path gets {}", blk(b)));
                self.finish(w, ti);
            }
            (Op::Refill(k), 0) => {
                // `rmqueue_bulk`: `k` blocks from the zone, words set to `Pcp`.
                let mut n = 0;
                while n < k as usize {
                    match self.take_free(w, ti, Tag::Pcp) {
                        Some(b) => {
                            w.t[ti].buf[n] = b;
                            n += 1;
                        }
                        None => break,
                    }
                }
                out.note(|| format!("T{ti} refill: takes {n} blocks from the zone"));
                if n == 0 {
                    self.finish(w, ti);
                } else {
                    let t = &mut w.t[ti];
                    t.nbuf = n as u8;
                    t.seq = Seq::PushAll;
                    t.ph = 1;
                }
            }
            (op, ph) => panic!("T{ti} {op:?}: no phase {ph}"),
        }
    }

    /// One step of the stopper: `Zone::pcp_lock` (`lock` + `stop_stacks`:
    /// `Stacks::stop`, `take_all_stopped`, the blocks to the lists), then the
    /// guard's `Drop` (`Stacks::resume`) and the unlock.
    fn stopper_step(&self, w: &mut World, out: &mut Out) {
        let x = self.cfg.stops[w.s.k as usize] as usize;
        let m = self.cfg.mutation;
        match w.s.sp {
            0 => {
                // `self.pcp[cpu].lock(self, cpu)` (the search waits for it).
                w.cpu[x].lock = STOPPER;
                w.s.sp = 1;
                out.note(|| format!("S: locks cpu{x}"));
            }
            1 => {
                // `c.stopped.store(1, Ordering::SeqCst)`.
                if m != Mutation::NoStoppedFlag {
                    w.cpu[x].stopped = true;
                }
                w.s.sp = 2;
                if m == Mutation::NoStoppedFlag {
                    out.note(|| format!("S: does not set cpu{x}.stopped (mutation)"));
                } else {
                    out.note(|| format!("S: sets cpu{x}.stopped"));
                }
            }
            2 => {
                // `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, FLAG_CPU, cpu)`:
                // restarts the section the CPU runs now. A thread preempted inside
                // its section was already sent to its abort label.
                let r = w.cpu[x].running;
                if m == Mutation::NoMembarrier {
                    out.note(|| format!("S: no membarrier on cpu{x} (mutation)"));
                } else if r != NONE
                    && self.in_section(&w.t[r as usize])
                    && w.t[r as usize].cpu as usize == x
                {
                    Self::abort(w, r as usize, Cov::MembarrierAbort, out);
                    w.cpu[x].running = NONE;
                    out.note(|| format!("S: membarrier on cpu{x} aborts T{r}"));
                } else {
                    out.note(|| format!("S: membarrier on cpu{x} (no section runs there)"));
                }
                w.cpu[x].held = true;
                w.s.sp = 3;
            }
            3 => {
                // `take_all_stopped`: `let w = self.words[p].load(Ordering::Acquire)`.
                let word = w.cpu[x].word;
                let len = len_of(word);
                out.note(|| format!("S: reads cpu{x}.len = {len}"));
                if len > CAP {
                    out.bad
                        .push((Kind::Overflow, format!("cpu{x}.len = {len} > CAP")));
                    return;
                }
                w.s.w = word;
                w.s.len = len as u8;
                w.s.i = 0;
                w.s.sp = if len > 0 { 4 } else { 5 };
                if len > 0 {
                    out.hit(Cov::StopTakesBlocks);
                }
            }
            4 => {
                // `self.slots[p][..len].iter().map(|s| s.load(Ordering::Relaxed))`.
                let i = w.s.i as usize;
                let b = w.cpu[x].slots[i];
                w.s.regs[i] = b;
                w.s.i += 1;
                if w.s.i == w.s.len {
                    w.s.sp = 5;
                }
                out.note(|| format!("S: reads cpu{x}.slot[{i}] = {}", blk(b)));
            }
            5 => {
                // `self.words[p].store(w & !LEN_MASK)`, `outflow += len`; then, under
                // the pcp lock the stopper holds, each block's word set to `Pcp` and
                // `push_head` on the lists.
                let nw = w.s.w & !LEN_MASK;
                w.cpu[x].word = nw;
                let len = w.s.len;
                w.cpu[x].outflow += len;
                for i in 0..len as usize {
                    let b = w.s.regs[i];
                    if (b as usize) < NB {
                        w.cpu[x].lists[b as usize] += 1;
                        w.tag[b as usize] = Tag::Pcp;
                    } else {
                        w.garbage += 1;
                    }
                }
                out.note(|| format!("S: stores cpu{x}.len = 0, {len} blocks to its lists"));
                let s = &mut w.s;
                s.w = 0;
                s.len = 0;
                s.i = 0;
                s.regs = [NONE; CAP];
                s.sp = 6;
            }
            6 => {
                // `PcpLocked::drop`: `z.stacks.resume(i)`.
                w.cpu[x].stopped = false;
                w.cpu[x].held = false;
                w.s.sp = 7;
                out.note(|| format!("S: clears cpu{x}.stopped"));
            }
            _ => {
                // The guard's `TryLockGuard` is dropped after `drop()` ran.
                w.cpu[x].lock = NONE;
                w.s.sp = 0;
                w.s.k += 1;
                out.note(|| format!("S: unlocks cpu{x}"));
            }
        }
    }

    // -----------------------------------------------------------------------
    // Invariants
    // -----------------------------------------------------------------------

    fn check(&self, w: &World, fin: bool, bad: &mut Vec<(Kind, String)>) {
        let nb = self.cfg.blocks;
        let mut count = [0usize; NB];
        let mut on_stack = [false; NB];
        let conserve = self.cfg.every_state || fin;
        for (x, cpu) in w.cpu.iter().enumerate() {
            let len = len_of(cpu.word);
            if len > CAP {
                bad.push((Kind::Overflow, format!("cpu{x}.len = {len} > CAP")));
                return;
            }
            for (i, &b) in cpu.slots[..len].iter().enumerate() {
                if b as usize >= NB {
                    if conserve {
                        bad.push((
                            Kind::Garbage,
                            format!("cpu{x}.slot[{i}] below the length holds no block"),
                        ));
                    }
                    continue;
                }
                count[b as usize] += 1;
                on_stack[b as usize] = true;
                if w.tag[b as usize] != Tag::Pcp {
                    bad.push((
                        Kind::NotPcpOnStack,
                        format!(
                            "{} on cpu{x}'s stack has state {:?}",
                            blk(b),
                            w.tag[b as usize]
                        ),
                    ));
                }
            }
            if cpu.word >> PUSH_SHIFT != u64::from(cpu.pushes_ok) {
                bad.push((
                    Kind::PushCounter,
                    format!(
                        "cpu{x} counts {} pushes, {} committed",
                        cpu.word >> PUSH_SHIFT,
                        cpu.pushes_ok
                    ),
                ));
            }
        }
        if !conserve {
            return;
        }
        if w.garbage > 0 {
            bad.push((
                Kind::Garbage,
                "an empty slot was taken as a block".to_string(),
            ));
        }
        let mut place = [""; NB];
        for b in 0..nb {
            let mut add = |n: usize, p: &'static str| {
                if n > 0 {
                    count[b] += n;
                    place[b] = p;
                }
            };
            add(w.ext[b] as usize, "program");
            add(w.pool[b] as usize, "pool");
            add(w.cpu.iter().map(|c| c.lists[b] as usize).sum(), "lists");
            add(w.t.iter().map(|t| t.own[b] as usize).sum(), "thread");
            if on_stack[b] {
                place[b] = "stack";
            }
            match count[b] {
                0 => bad.push((Kind::Lost, format!("{} is nowhere", blk(b as u8)))),
                1 => {}
                n => bad.push((
                    Kind::Duplicated,
                    format!("{} is in {n} places", blk(b as u8)),
                )),
            }
        }
        if !fin {
            return;
        }
        for (x, cpu) in w.cpu.iter().enumerate() {
            // `CpuStacks::pops`.
            let pushes = cpu.word >> PUSH_SHIFT;
            let pops = (pushes + u64::from(cpu.inflow))
                .saturating_sub(u64::from(cpu.outflow) + len_of(cpu.word) as u64);
            if pops != u64::from(cpu.pops_ok) {
                bad.push((
                    Kind::PopsFigure,
                    format!("cpu{x}: pops figure {pops}, {} pops committed", cpu.pops_ok),
                ));
            }
        }
        for &b in &self.raced {
            if w.cas_wins[b as usize] != 1 {
                bad.push((
                    Kind::RaceWinners,
                    format!(
                        "{} freed by {} racing frees",
                        blk(b),
                        w.cas_wins[b as usize]
                    ),
                ));
            }
        }
        for b in 0..nb {
            let want = match place[b] {
                "pool" => Tag::Free,
                "lists" | "stack" => Tag::Pcp,
                _ => Tag::Alloc,
            };
            if count[b] == 1 && w.tag[b] != want {
                bad.push((
                    Kind::WrongState,
                    format!(
                        "{} in the {} has state {:?}",
                        blk(b as u8),
                        place[b],
                        w.tag[b]
                    ),
                ));
            }
        }
    }

    // -----------------------------------------------------------------------
    // The search
    // -----------------------------------------------------------------------

    /// Visits every reachable state, depth first (`bfs`: breadth first, for
    /// the shortest path to a violation); stops early once `goal` is found.
    fn search(&self, bfs: bool, goal: Option<Kind>) -> Report {
        self.search_by(bfs, goal, World::key)
    }

    /// `search`, with `key` giving the visited set's form of a state.
    fn search_by<K: Hash + Eq>(
        &self,
        bfs: bool,
        goal: Option<Kind>,
        key: impl Fn(&World) -> K,
    ) -> Report {
        let t0 = Instant::now();
        let init = self.init();
        let mut seen: HashSet<K, BuildHasherDefault<Mix>> = HashSet::default();
        // Per visited state: its parent and the choice that led to it.
        let mut parent: Vec<(u32, Event)> = Vec::new();
        let mut work: VecDeque<(World, u32)> = VecDeque::new();
        let mut found: BTreeMap<Kind, Found> = BTreeMap::new();
        let mut transitions = 0usize;
        let mut finals = 0usize;
        let mut cov = 0u32;
        let path_to = |parent: &Vec<(u32, Event)>, mut id: u32| {
            let mut p = Vec::new();
            while id != 0 {
                let (up, ev) = parent[id as usize];
                p.push(ev);
                id = up;
            }
            p.reverse();
            p
        };
        let record = |found: &mut BTreeMap<Kind, Found>,
                      bad: Vec<(Kind, String)>,
                      path: &dyn Fn() -> Vec<Event>| {
            for (k, msg) in bad {
                found
                    .entry(k)
                    .or_insert_with(|| Found { msg, path: path() });
            }
        };
        let mut bad = Vec::new();
        self.check(&init, self.is_final(&init), &mut bad);
        record(&mut found, std::mem::take(&mut bad), &|| Vec::new());
        seen.insert(key(&init));
        parent.push((0, Event::Stop));
        work.push_back((init, 0));
        'outer: while let Some((w, id)) = if bfs {
            work.pop_front()
        } else {
            work.pop_back()
        } {
            if let Some(g) = goal {
                if found.contains_key(&g) {
                    break 'outer;
                }
            }
            let evs = self.enabled(&w);
            if evs.is_empty() && !self.is_final(&w) {
                record(
                    &mut found,
                    vec![(Kind::Stuck, "no step is possible".into())],
                    &|| path_to(&parent, id),
                );
            }
            for ev in evs {
                let mut next = w.clone();
                let mut out = Out::quiet();
                self.apply(&mut next, ev, &mut out);
                transitions += 1;
                cov |= out.cov;
                let fatal = out.bad.iter().any(|(k, _)| k.fatal());
                if !out.bad.is_empty() {
                    let p = || {
                        let mut p = path_to(&parent, id);
                        p.push(ev);
                        p
                    };
                    record(&mut found, std::mem::take(&mut out.bad), &p);
                }
                if fatal || !seen.insert(key(&next)) {
                    continue;
                }
                let nid = parent.len() as u32;
                parent.push((id, ev));
                let fin = self.is_final(&next);
                finals += usize::from(fin);
                self.check(&next, fin, &mut bad);
                let fatal = bad.iter().any(|(k, _)| k.fatal());
                if !bad.is_empty() {
                    record(&mut found, std::mem::take(&mut bad), &|| {
                        path_to(&parent, nid)
                    });
                }
                if !fatal {
                    work.push_back((next, nid));
                }
            }
        }
        Report {
            name: self.cfg.name,
            states: seen.len(),
            transitions,
            finals,
            cov,
            secs: t0.elapsed().as_secs_f64(),
            found,
        }
    }

    /// The steps of `path`, one line each.
    fn render(&self, path: &[Event]) -> String {
        let mut w = self.init();
        let mut s = String::new();
        for &ev in path {
            let mut out = Out {
                bad: Vec::new(),
                log: Some(Vec::new()),
                cov: 0,
            };
            self.apply(&mut w, ev, &mut out);
            for line in out.log.unwrap_or_default() {
                s.push_str("    ");
                s.push_str(&line);
                s.push('\n');
            }
        }
        s
    }
}

fn blk(b: u8) -> String {
    if (b as usize) < NB {
        format!("b{b}")
    } else {
        "<none>".to_string()
    }
}

// ---------------------------------------------------------------------------
// Configurations
// ---------------------------------------------------------------------------

/// Migrations per run: 2 in release builds (as CI runs this file), 1 in debug
/// builds, where the search is several times slower.
const MIGRATIONS: u8 = if cfg!(debug_assertions) { 1 } else { 2 };

fn base(name: &'static str) -> Config {
    Config {
        name,
        threads: Vec::new(),
        blocks: 0,
        ext: Vec::new(),
        stack0: Vec::new(),
        stops: vec![0],
        refill: 2,
        migrations: MIGRATIONS,
        signals: 1,
        mutation: Mutation::None,
        every_state: true,
    }
}

fn summary(r: &Report) -> String {
    format!(
        "{:<16} {:>9} states {:>10} transitions {:>7} final states {:>6.2} s",
        r.name, r.states, r.transitions, r.finals, r.secs
    )
}

/// Searches `cfg` (unmutated) exhaustively: no violation anywhere, some run
/// finishes, and every behaviour of `must_reach` happens in some run.
fn check_clean(cfg: Config, must_reach: &[Cov]) {
    let model = Model::new(cfg);
    let r = model.search(false, None);
    println!("{}", summary(&r));
    if let Some((kind, f)) = r.found.iter().next() {
        panic!("{}: {kind:?}: {}\n{}", r.name, f.msg, model.render(&f.path));
    }
    assert!(r.finals > 0, "{}: no run finished", r.name);
    let missed: Vec<Cov> = must_reach
        .iter()
        .copied()
        .filter(|&c| r.cov & (1 << c as u32) == 0)
        .collect();
    assert!(missed.is_empty(), "{}: never reached {missed:?}", r.name);
}

use Blk::{Fixed, Mine};
use Cov::*;
use Op::{Alloc, Flush, Free, Refill};

/// The compact keys merge no states: the search with them and the search with
/// whole states visit the same number of states.
#[test]
fn compact_keys_are_exact() {
    let cfg = Config {
        threads: vec![
            (0, vec![Refill(2)]),
            (0, vec![Flush(2)]),
            (1, vec![Alloc, Free(Mine)]),
        ],
        blocks: 3,
        migrations: 1,
        signals: 1,
        ..base("keys")
    };
    let model = Model::new(cfg);
    let packed = model.search(false, None);
    let whole = model.search_by(false, None, World::clone);
    println!("{}\n{}", summary(&packed), summary(&whole));
    assert_eq!(packed.states, whole.states);
    assert_eq!(packed.transitions, whole.transitions);
}

/// Two threads share CPU 0 (each preempts the other), a third allocates on
/// CPU 1 (a refill from the zone) and may move over; the stopper stops CPU 0.
#[test]
fn free_alloc_and_stop() {
    let cfg = Config {
        threads: vec![
            (0, vec![Free(Fixed(0)), Alloc]),
            (0, vec![Free(Fixed(1))]),
            (1, vec![Alloc]),
        ],
        blocks: 3,
        ext: vec![0, 1],
        ..base("free/alloc/stop")
    };
    check_clean(
        cfg,
        &[
            PreemptAbort,
            MigrateAbort,
            SignalAbort,
            MembarrierAbort,
            AbortAfterSlotStore,
            PushOk,
            PushStopped,
            PopOk,
            PopEmpty,
            PopStopped,
            PushAllOk,
            PushAllStopped,
            StopTakesBlocks,
            TrylockFails,
            OrdinaryAlloc,
            OrdinaryFree,
            RefillFromLists,
        ],
    );
}

/// Three threads on CPU 0, each preempting the others inside their sections:
/// two frees and two allocations, one of them stopped, over two stops.
#[test]
fn three_threads_on_one_cpu() {
    let cfg = Config {
        threads: vec![
            (0, vec![Free(Fixed(0))]),
            (0, vec![Free(Fixed(1))]),
            (0, vec![Alloc, Alloc]),
        ],
        blocks: 3,
        ext: vec![0, 1],
        stops: vec![0, 0],
        ..base("three on cpu0")
    };
    check_clean(
        cfg,
        &[
            PreemptAbort,
            MigrateAbort,
            SignalAbort,
            MembarrierAbort,
            AbortAfterSlotStore,
            PushOk,
            PushStopped,
            PopOk,
            PopEmpty,
            PopStopped,
            StopTakesBlocks,
        ],
    );
}

/// Two frees of one block from two CPUs (exactly one may win), a flush beside
/// them, both CPUs stopped in turn.
#[test]
fn racing_frees() {
    let cfg = Config {
        threads: vec![
            (0, vec![Free(Fixed(0))]),
            (1, vec![Free(Fixed(0))]),
            (0, vec![Flush(2)]),
        ],
        blocks: 2,
        ext: vec![0],
        stack0: vec![1],
        stops: vec![0, 1],
        ..base("racing frees")
    };
    check_clean(
        cfg,
        &[
            PreemptAbort,
            MigrateAbort,
            SignalAbort,
            MembarrierAbort,
            AbortAfterSlotStore,
            PushOk,
            PushStopped,
            PopManyOk,
            PopManyStopped,
            StopTakesBlocks,
            CasLost,
            OrdinaryFree,
        ],
    );
}

/// A refill and a flush of two blocks on CPU 0 against an allocation and its
/// free from CPU 1, with a stop of CPU 0.
#[test]
fn refill_flush_alloc_free() {
    let cfg = Config {
        threads: vec![
            (0, vec![Refill(2)]),
            (0, vec![Flush(2)]),
            (1, vec![Alloc, Free(Mine)]),
        ],
        blocks: 3,
        ..base("refill/flush")
    };
    check_clean(
        cfg,
        &[
            PreemptAbort,
            MigrateAbort,
            SignalAbort,
            MembarrierAbort,
            AbortAfterSlotStore,
            PushOk,
            PushFull,
            PushStopped,
            PopOk,
            PopEmpty,
            PopStopped,
            PushAllOk,
            PushAllStopped,
            PushAllNoRoom,
            PopManyOk,
            PopManyStopped,
            StopTakesBlocks,
            TrylockFails,
            OrdinaryAlloc,
            OrdinaryFree,
            RefillFromLists,
            FreeFlushes,
        ],
    );
}

/// A full stack: the free flushes (trylock, `pop_many`), an allocation pops
/// beside it, a flush runs on CPU 1 (and may move), the stopper stops CPU 0.
#[test]
fn full_stack() {
    let cfg = Config {
        threads: vec![
            (0, vec![Free(Fixed(2))]),
            (0, vec![Alloc]),
            (1, vec![Flush(2)]),
        ],
        blocks: 3,
        ext: vec![2],
        stack0: vec![0, 1],
        ..base("full stack")
    };
    check_clean(
        cfg,
        &[
            PreemptAbort,
            MigrateAbort,
            SignalAbort,
            MembarrierAbort,
            AbortAfterSlotStore,
            PushOk,
            PushFull,
            PushStopped,
            PopOk,
            PopEmpty,
            PopStopped,
            PushAllOk,
            PopManyOk,
            PopManyStopped,
            StopTakesBlocks,
            TrylockFails,
            OrdinaryAlloc,
            OrdinaryFree,
            RefillFromLists,
            FreeFlushes,
        ],
    );
}

/// An empty stack: the allocation refills three blocks under the pcp lock and
/// pushes two (`push_all`), racing a free and the stopper, with more
/// migrations and signals.
#[test]
fn refill_path() {
    let cfg = Config {
        threads: vec![(0, vec![Alloc]), (0, vec![Free(Fixed(0))])],
        blocks: 4,
        ext: vec![0],
        refill: 3,
        migrations: 2,
        signals: 2,
        ..base("refill path")
    };
    check_clean(
        cfg,
        &[
            PreemptAbort,
            MigrateAbort,
            SignalAbort,
            MembarrierAbort,
            AbortAfterSlotStore,
            PushOk,
            PushFull,
            PushStopped,
            PopOk,
            PopEmpty,
            PopStopped,
            PushAllOk,
            PushAllStopped,
            PushAllNoRoom,
            PopManyOk,
            StopTakesBlocks,
            TrylockFails,
            OrdinaryAlloc,
            OrdinaryFree,
            RefillFromLists,
            FreeFlushes,
        ],
    );
}

// ---------------------------------------------------------------------------
// Mutations: the search must find what each one breaks
// ---------------------------------------------------------------------------

/// A configuration that gives each mutation its chance: two threads on CPU 0
/// (a free and an allocation), a block already on the stack, one stop.
fn mutant(mutation: Mutation, every_state: bool) -> Config {
    Config {
        threads: vec![
            (0, vec![Free(Fixed(0))]),
            (0, vec![Alloc]),
            (0, vec![Free(Fixed(2))]),
        ],
        blocks: 3,
        ext: vec![0, 2],
        stack0: vec![1],
        migrations: 0,
        signals: 0,
        mutation,
        every_state,
        ..base("mutant")
    }
}

/// Runs the mutant, in both checking modes, and demands a lost or duplicated
/// block; prints the shortest interleaving that shows it.
fn expect_loss_or_duplicate(mutation: Mutation) {
    use std::fmt::Write as _;
    for every_state in [true, false] {
        let model = Model::new(mutant(mutation, every_state));
        let r = model.search(false, None);
        // One print per search, so parallel tests do not interleave their lines.
        let mut text = format!(
            "{mutation:?} (every state: {every_state}): {}\n",
            summary(&r)
        );
        for (k, f) in &r.found {
            let _ = writeln!(text, "  {k:?}: {}", f.msg);
        }
        let kinds: Vec<Kind> = [Kind::Lost, Kind::Duplicated]
            .into_iter()
            .filter(|k| r.found.contains_key(k))
            .collect();
        assert!(
            !kinds.is_empty(),
            "{mutation:?}: no lost or duplicated block found: {:?}",
            r.found.keys()
        );
        for kind in kinds {
            let short = model.search(true, Some(kind));
            let f = &short.found[&kind];
            let _ = write!(
                text,
                "  shortest {kind:?} ({} steps): {}\n{}",
                f.path.len(),
                f.msg,
                model.render(&f.path)
            );
        }
        println!("{text}");
    }
}

#[test]
fn the_unmutated_mutant_configuration_is_clean() {
    for every_state in [true, false] {
        let model = Model::new(mutant(Mutation::None, every_state));
        let r = model.search(false, None);
        println!("{}", summary(&r));
        assert!(r.found.is_empty(), "{:?}", r.found);
    }
}

#[test]
fn a_stopper_without_membarrier_loses_blocks() {
    expect_loss_or_duplicate(Mutation::NoMembarrier);
}

#[test]
fn sequences_that_ignore_stopped_lose_blocks() {
    expect_loss_or_duplicate(Mutation::NoStoppedCheck);
}

#[test]
fn a_push_that_commits_before_its_slot_loses_blocks() {
    expect_loss_or_duplicate(Mutation::CommitBeforeSlot);
}

#[test]
fn a_kernel_that_does_not_restart_preempted_sections_loses_blocks() {
    expect_loss_or_duplicate(Mutation::NoPreemptAbort);
}

#[test]
fn a_stopper_that_never_sets_stopped_loses_blocks() {
    expect_loss_or_duplicate(Mutation::NoStoppedFlag);
}
