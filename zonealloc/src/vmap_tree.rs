//! The free-space tree of the vmalloc range: an AVL tree of free areas keyed by start
//! and augmented with the largest free size in each subtree (`free_vmap_area_root`).
//!
//! Lowest layer of vmalloc, pure bookkeeping: it never touches memory, takes no lock
//! (the vmalloc space keeps it behind its KVA lock) and builds without `std`. Units
//! are whatever the caller chooses; vmalloc uses virtual page numbers.
//!
//! # The augmented tree
//!
//! Each node is one maximal free area `[start, start + size)`. Nodes are ordered by
//! `start`, and free areas never touch (a freed range merges with both address
//! neighbours), so in-order traversal lists the free space from low to high address.
//! Every node also stores `max`, the largest `size` in its subtree (Linux's
//! `subtree_max_size`):
//!
//! ```text
//!                      [64,+8)  max 32
//!                     /              \
//!          [16,+4) max 4           [96,+32) max 32
//!          /                          \
//!    [0,+2) max 2                 [200,+1) max 1
//! ```
//!
//! `find_vmap_lowest_match` for `size` with alignment `align` looks for the lowest
//! area of at least `need = size + align - 1` units: that much room holds an aligned
//! block of `size` wherever the area starts (Linux's `adjust_search_size`; with
//! `align == 1` it is an exact first fit). The descent never backtracks: at each
//! node, go left if the left subtree's `max` reaches `need` (a lower fit exists
//! there); else take this node if it fits; else the right subtree must hold the fit,
//! since the node's own `max` said one exists below it. One root-to-leaf path:
//! O(log n).
//!
//! Allocation then clips the request out of the area found (`va_clip`): the whole
//! area, its left edge, its right edge, or its middle (the node keeps the left part,
//! a new node takes the right). Freeing looks up the address neighbours and either
//! grows one of them, fuses both, or inserts a node (`merge_or_add_vmap_area`). Every
//! change re-derives `max` and the AVL heights on the path back to the root, so both
//! operations are O(log n) and the tree height stays below 1.45 log2(n + 2).
//!
//! Nodes live in one vector and link by index; removed nodes go on an intrusive
//! spare list and are reused, so steady-state alloc/free cycles allocate nothing.

use alloc::vec::Vec;
use core::fmt;

/// "No node".
const NIL: u32 = u32::MAX;

/// Deepest path walked iteratively. AVL height is below 1.45 log2(n + 2); with at
/// most 2^32 nodes that is under 48.
const MAX_DEPTH: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Node {
    /// First unit of the free area; the key.
    start: u64,
    /// Units in the area; never zero.
    size: u64,
    /// `max(size, left.max, right.max)`; for a node on the spare list, unused.
    max: u64,
    /// Left child (lower addresses); for a spare node, the next spare.
    left: u32,
    /// Right child (higher addresses).
    right: u32,
    /// AVL height of the subtree (a leaf is 1).
    height: u8,
}

/// Why a free-space tree operation was refused. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeError {
    /// The range is empty.
    ZeroSize,
    /// `start + size` overflows.
    Overflow,
    /// The range overlaps free space already in the tree (a double free).
    Overlap {
        /// Start of the free area it overlaps.
        free_start: u64,
        /// Size of that free area.
        free_size: u64,
    },
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::ZeroSize => f.write_str("empty range"),
            TreeError::Overflow => f.write_str("range end overflows"),
            TreeError::Overlap {
                free_start,
                free_size,
            } => write!(
                f,
                "range overlaps the free area [{free_start:#x}, +{free_size:#x})"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TreeError {}

/// A free-space tree: the free areas of a range, ordered by address, each subtree
/// knowing its largest area.
///
/// Invariants (checked by `check_invariants`): in-order starts strictly increase and
/// consecutive areas neither overlap nor touch; every `size > 0`; every `max` and
/// `height` equals its recomputation; AVL balance factors are in `-1..=1`; `len` and
/// `free_units` equal a recount; spare plus live nodes fill the node vector.
///
/// # Examples
/// ```
/// use zonealloc::FreeAreaTree;
/// let mut t = FreeAreaTree::with_range(0, 100);
/// let a = t.alloc(10, 1).unwrap(); // lowest fit
/// let b = t.alloc(4, 16).unwrap(); // aligned to 16
/// assert_eq!((a, b), (0, 16));
/// t.free(a, 10).unwrap();
/// t.free(b, 4).unwrap();
/// assert_eq!(t.iter().collect::<Vec<_>>(), [(0, 100)]); // merged back
/// ```
#[derive(Clone)]
pub struct FreeAreaTree {
    nodes: Vec<Node>,
    root: u32,
    /// Head of the spare-node list, linked through `left`.
    spare: u32,
    len: usize,
    free_units: u64,
}

impl Default for FreeAreaTree {
    fn default() -> Self {
        FreeAreaTree::new()
    }
}

impl fmt::Debug for FreeAreaTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreeAreaTree")
            .field("len", &self.len)
            .field("free_units", &self.free_units)
            .field("largest", &self.largest())
            .finish()
    }
}

impl FreeAreaTree {
    /// An empty tree: no free space.
    pub const fn new() -> FreeAreaTree {
        FreeAreaTree {
            nodes: Vec::new(),
            root: NIL,
            spare: NIL,
            len: 0,
            free_units: 0,
        }
    }

    /// A tree whose free space is the single area `[start, start + size)` (empty if
    /// `size` is 0 or the end would overflow).
    pub fn with_range(start: u64, size: u64) -> FreeAreaTree {
        let mut t = FreeAreaTree::new();
        let _ = t.free(start, size);
        t
    }

    /// Number of free areas.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no free space at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total free units.
    pub fn free_units(&self) -> u64 {
        self.free_units
    }

    /// Size of the largest free area (0 if none): the root's `max`.
    pub fn largest(&self) -> u64 {
        self.max_of(self.root)
    }

    /// The free areas as `(start, size)`, lowest address first.
    pub fn iter(&self) -> Iter<'_> {
        let mut it = Iter {
            tree: self,
            stack: Vec::new(),
        };
        it.push_left(self.root);
        it
    }

    /// The free area containing unit `at`, if `at` is free.
    pub fn area_containing(&self, at: u64) -> Option<(u64, u64)> {
        let n = self.floor(at);
        if n == NIL {
            return None;
        }
        let node = self.nodes[n as usize];
        (at - node.start < node.size).then_some((node.start, node.size))
    }

    // -------------------------------------------------------------------------
    // Allocation: find_vmap_lowest_match, then va_clip
    // -------------------------------------------------------------------------

    /// `find_vmap_lowest_match()`: the lowest free area of at least
    /// `size + align - 1` units (room for `size` at alignment `align` wherever the
    /// area starts), as `(start, size)`. O(log n).
    ///
    /// `align` must be a power of two; `None` for `size == 0`, a bad `align`, or
    /// when no area is large enough.
    pub fn find_lowest_match(&self, size: u64, align: u64) -> Option<(u64, u64)> {
        let n = self.lowest_match(size, align)?;
        let node = self.nodes[n as usize];
        Some((node.start, node.size))
    }

    fn lowest_match(&self, size: u64, align: u64) -> Option<u32> {
        if size == 0 || !align.is_power_of_two() {
            return None;
        }
        let need = size.checked_add(align - 1)?;
        let mut n = self.root;
        if self.max_of(n) < need {
            return None;
        }
        loop {
            let node = &self.nodes[n as usize];
            if self.max_of(node.left) >= need {
                n = node.left;
            } else if node.size >= need {
                return Some(n);
            } else {
                // `node.max >= need` and neither the left subtree nor the node has
                // it, so the right subtree does.
                debug_assert!(self.max_of(node.right) >= need);
                n = node.right;
            }
        }
    }

    /// Allocates `size` units aligned to `align` (a power of two) from the lowest
    /// free area that surely holds them (see `find_lowest_match`), and returns the
    /// start. `None` if nothing fits; the tree is then unchanged. O(log n).
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let n = self.lowest_match(size, align)?;
        let Node {
            start: a_start,
            size: a_size,
            ..
        } = self.nodes[n as usize];
        let at = a_start.next_multiple_of(align);
        let left = at - a_start;
        let right = a_start + a_size - (at + size);
        self.clip(a_start, left, at + size, right);
        Some(at)
    }

    /// `va_clip()`: what is left of the area at `a_start` is `left` units at its
    /// start and `right` units at `r_start`. (`insert`, `remove` and `update` keep
    /// `free_units`, so every clip and merge below balances by construction.)
    fn clip(&mut self, a_start: u64, left: u64, r_start: u64, right: u64) {
        match (left, right) {
            // Full fit: the area is used up.
            (0, 0) => {
                let removed = self.remove(a_start);
                debug_assert!(removed.is_some());
            }
            // Left edge: the area now starts after the allocation (its key grows
            // but stays below the next area's).
            (0, r) => self.update(a_start, r_start, r),
            // Right edge: the area keeps its start and shrinks.
            (l, 0) => self.update(a_start, a_start, l),
            // Middle: the node keeps the left part, a new one takes the right.
            (l, r) => {
                self.update(a_start, a_start, l);
                self.insert(r_start, r);
            }
        }
    }

    // -------------------------------------------------------------------------
    // Freeing: merge_or_add_vmap_area
    // -------------------------------------------------------------------------

    /// `merge_or_add_vmap_area()`: returns `[start, start + size)` to the free space,
    /// merging it with the free areas just below and just above. O(log n).
    ///
    /// # Errors
    /// `ZeroSize`, `Overflow`, or `Overlap` if any unit of the range is already free;
    /// the tree is unchanged then.
    pub fn free(&mut self, start: u64, size: u64) -> Result<(), TreeError> {
        if size == 0 {
            return Err(TreeError::ZeroSize);
        }
        let end = start.checked_add(size).ok_or(TreeError::Overflow)?;
        let prev = self.floor(start);
        let next = self.ceil_after(start);
        let overlap = |n: u32| {
            let node = self.nodes[n as usize];
            TreeError::Overlap {
                free_start: node.start,
                free_size: node.size,
            }
        };
        let mut merge_prev = None;
        if prev != NIL {
            let p = self.nodes[prev as usize];
            let p_end = p.start + p.size;
            if p_end > start {
                return Err(overlap(prev));
            }
            if p_end == start {
                merge_prev = Some(p);
            }
        }
        let mut merge_next = None;
        if next != NIL {
            let q = self.nodes[next as usize];
            if q.start < end {
                return Err(overlap(next));
            }
            if q.start == end {
                merge_next = Some(q);
            }
        }
        match (merge_prev, merge_next) {
            (Some(p), Some(q)) => {
                self.remove(q.start);
                self.update(p.start, p.start, p.size + size + q.size);
            }
            (Some(p), None) => self.update(p.start, p.start, p.size + size),
            (None, Some(q)) => self.update(q.start, start, size + q.size),
            (None, None) => self.insert(start, size),
        }
        Ok(())
    }

    /// Takes `[start, start + size)` out of the free space, wherever it lies inside
    /// one free area (a fixed-address allocation). O(log n).
    ///
    /// Returns `false`, changing nothing, unless the whole range is free and inside
    /// a single area.
    pub fn alloc_at(&mut self, start: u64, size: u64) -> bool {
        let Some(end) = start.checked_add(size) else {
            return false;
        };
        if size == 0 {
            return false;
        }
        let Some((a_start, a_size)) = self.area_containing(start) else {
            return false;
        };
        let a_end = a_start + a_size;
        if end > a_end {
            return false;
        }
        self.clip(a_start, start - a_start, end, a_end - end);
        true
    }

    // -------------------------------------------------------------------------
    // Validation
    // -------------------------------------------------------------------------

    /// Walks the whole tree and checks every invariant listed on the type. Returns
    /// the number of checks made.
    ///
    /// # Errors
    /// A description of the first broken invariant.
    pub fn check_invariants(&self) -> Result<u64, TreeViolation> {
        let mut checks = 0u64;
        let mut ensure = |ok: bool, at: u64, what: &'static str| {
            checks += 1;
            if ok {
                Ok(())
            } else {
                Err(TreeViolation { at, what })
            }
        };
        let mut prev_end: Option<u64> = None;
        let mut count = 0usize;
        let mut sum = 0u64;
        for (start, size) in self.iter() {
            ensure(size > 0, start, "empty free area")?;
            if let Some(pe) = prev_end {
                ensure(
                    pe < start,
                    start,
                    "free areas overlap, touch or are unordered",
                )?;
            }
            let end = start.checked_add(size);
            ensure(end.is_some(), start, "free area end overflows")?;
            prev_end = end;
            count += 1;
            sum += size;
        }
        ensure(count == self.len, 0, "len differs from the number of areas")?;
        ensure(
            sum == self.free_units,
            0,
            "free_units differs from a recount",
        )?;
        let mut stack = Vec::new();
        if self.root != NIL {
            stack.push(self.root);
        }
        while let Some(n) = stack.pop() {
            let node = self.nodes[n as usize];
            let (l, r) = (node.left, node.right);
            let max = node.size.max(self.max_of(l)).max(self.max_of(r));
            ensure(node.max == max, node.start, "subtree max is stale")?;
            let (hl, hr) = (self.height(l), self.height(r));
            ensure(
                node.height as i32 == 1 + hl.max(hr),
                node.start,
                "height is stale",
            )?;
            ensure((hl - hr).abs() <= 1, node.start, "AVL balance broken")?;
            for c in [l, r] {
                if c != NIL {
                    stack.push(c);
                }
            }
        }
        let mut spares = 0usize;
        let mut s = self.spare;
        while s != NIL && spares <= self.nodes.len() {
            spares += 1;
            s = self.nodes[s as usize].left;
        }
        ensure(
            spares + self.len == self.nodes.len(),
            0,
            "spare and live nodes do not fill the node vector",
        )?;
        Ok(checks)
    }

    // -------------------------------------------------------------------------
    // Search helpers
    // -------------------------------------------------------------------------

    /// The node with the largest start `<= key`, or `NIL`.
    fn floor(&self, key: u64) -> u32 {
        let mut n = self.root;
        let mut best = NIL;
        while n != NIL {
            let node = &self.nodes[n as usize];
            if node.start <= key {
                best = n;
                n = node.right;
            } else {
                n = node.left;
            }
        }
        best
    }

    /// The node with the smallest start `> key`, or `NIL`.
    fn ceil_after(&self, key: u64) -> u32 {
        let mut n = self.root;
        let mut best = NIL;
        while n != NIL {
            let node = &self.nodes[n as usize];
            if node.start > key {
                best = n;
                n = node.left;
            } else {
                n = node.right;
            }
        }
        best
    }

    // -------------------------------------------------------------------------
    // AVL core
    // -------------------------------------------------------------------------

    #[inline]
    fn max_of(&self, n: u32) -> u64 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].max
        }
    }

    #[inline]
    fn height(&self, n: u32) -> i32 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].height as i32
        }
    }

    /// Recomputes `n`'s height and `max` from its children (`augment_tree_propagate`
    /// for one node).
    #[inline]
    fn pull(&mut self, n: u32) {
        let Node {
            left, right, size, ..
        } = self.nodes[n as usize];
        let h = 1 + self.height(left).max(self.height(right));
        let m = size.max(self.max_of(left)).max(self.max_of(right));
        let node = &mut self.nodes[n as usize];
        node.height = h as u8;
        node.max = m;
    }

    fn rotate_right(&mut self, n: u32) -> u32 {
        let l = self.nodes[n as usize].left;
        self.nodes[n as usize].left = self.nodes[l as usize].right;
        self.nodes[l as usize].right = n;
        self.pull(n);
        self.pull(l);
        l
    }

    fn rotate_left(&mut self, n: u32) -> u32 {
        let r = self.nodes[n as usize].right;
        self.nodes[n as usize].right = self.nodes[r as usize].left;
        self.nodes[r as usize].left = n;
        self.pull(n);
        self.pull(r);
        r
    }

    /// Restores the AVL balance at `n` (whose subtrees are balanced) and refreshes
    /// its augmentation; returns the subtree's new root.
    fn balance(&mut self, n: u32) -> u32 {
        self.pull(n);
        let Node { left, right, .. } = self.nodes[n as usize];
        let bf = self.height(left) - self.height(right);
        if bf > 1 {
            let ll = self.nodes[left as usize].left;
            let lr = self.nodes[left as usize].right;
            if self.height(ll) < self.height(lr) {
                let nl = self.rotate_left(left);
                self.nodes[n as usize].left = nl;
            }
            return self.rotate_right(n);
        }
        if bf < -1 {
            let rl = self.nodes[right as usize].left;
            let rr = self.nodes[right as usize].right;
            if self.height(rr) < self.height(rl) {
                let nr = self.rotate_right(right);
                self.nodes[n as usize].right = nr;
            }
            return self.rotate_left(n);
        }
        n
    }

    /// A node for `[start, start + size)`, from the spare list if possible.
    fn new_node(&mut self, start: u64, size: u64) -> u32 {
        let node = Node {
            start,
            size,
            max: size,
            left: NIL,
            right: NIL,
            height: 1,
        };
        if self.spare != NIL {
            let n = self.spare;
            self.spare = self.nodes[n as usize].left;
            self.nodes[n as usize] = node;
            n
        } else {
            let n = u32::try_from(self.nodes.len()).expect("more than 2^32 - 1 free areas");
            assert!(n != NIL, "more than 2^32 - 1 free areas");
            self.nodes.push(node);
            n
        }
    }

    /// Inserts a new area; its start must not be a key already. Counts its units.
    fn insert(&mut self, start: u64, size: u64) {
        let n = self.new_node(start, size);
        self.root = self.insert_at(self.root, n);
        self.len += 1;
        self.free_units += size;
    }

    fn insert_at(&mut self, t: u32, n: u32) -> u32 {
        if t == NIL {
            return n;
        }
        if self.nodes[n as usize].start < self.nodes[t as usize].start {
            let l = self.insert_at(self.nodes[t as usize].left, n);
            self.nodes[t as usize].left = l;
        } else {
            let r = self.insert_at(self.nodes[t as usize].right, n);
            self.nodes[t as usize].right = r;
        }
        self.balance(t)
    }

    /// Removes the area starting at `start`; returns its size. Uncounts its units.
    fn remove(&mut self, start: u64) -> Option<u64> {
        let (root, removed) = self.remove_at(self.root, start);
        self.root = root;
        let n = removed?;
        let size = self.nodes[n as usize].size;
        self.nodes[n as usize].left = self.spare;
        self.spare = n;
        self.len -= 1;
        self.free_units -= size;
        Some(size)
    }

    fn remove_at(&mut self, t: u32, key: u64) -> (u32, Option<u32>) {
        if t == NIL {
            return (NIL, None);
        }
        let Node {
            start, left, right, ..
        } = self.nodes[t as usize];
        if key < start {
            let (l, r) = self.remove_at(left, key);
            self.nodes[t as usize].left = l;
            (self.balance(t), r)
        } else if key > start {
            let (nr, r) = self.remove_at(right, key);
            self.nodes[t as usize].right = nr;
            (self.balance(t), r)
        } else if left == NIL {
            (right, Some(t))
        } else if right == NIL {
            (left, Some(t))
        } else {
            let (nr, m) = self.remove_min(right);
            self.nodes[m as usize].left = left;
            self.nodes[m as usize].right = nr;
            (self.balance(m), Some(t))
        }
    }

    /// Unlinks the lowest node of subtree `t`; returns (new subtree root, node).
    fn remove_min(&mut self, t: u32) -> (u32, u32) {
        let Node { left, right, .. } = self.nodes[t as usize];
        if left == NIL {
            return (right, t);
        }
        let (l, m) = self.remove_min(left);
        self.nodes[t as usize].left = l;
        (self.balance(t), m)
    }

    /// Changes the area keyed `key` to `[start, start + size)` and refreshes `max`
    /// on the path to the root. The new start must keep the in-order position (it
    /// stays between the neighbours' ends), so no rebalancing is needed. Adjusts
    /// `free_units` by the size change.
    fn update(&mut self, key: u64, start: u64, size: u64) {
        let mut path = [NIL; MAX_DEPTH];
        let mut depth = 0;
        let mut n = self.root;
        while n != NIL {
            path[depth] = n;
            depth += 1;
            let node = &self.nodes[n as usize];
            if key == node.start {
                break;
            }
            n = if key < node.start {
                node.left
            } else {
                node.right
            };
        }
        debug_assert!(n != NIL, "update of a missing key");
        if n == NIL {
            return;
        }
        let node = &mut self.nodes[n as usize];
        self.free_units = self.free_units - node.size + size;
        node.start = start;
        node.size = size;
        for &p in path[..depth].iter().rev() {
            self.pull(p);
        }
    }
}

/// A broken invariant of a `FreeAreaTree`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeViolation {
    /// The area start concerned (0 for whole-tree counters).
    pub at: u64,
    /// What is wrong.
    pub what: &'static str,
}

impl fmt::Display for TreeViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "free area {:#x}: {}", self.at, self.what)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TreeViolation {}

/// In-order iterator over the free areas of a `FreeAreaTree`.
pub struct Iter<'t> {
    tree: &'t FreeAreaTree,
    stack: Vec<u32>,
}

impl Iter<'_> {
    fn push_left(&mut self, mut n: u32) {
        while n != NIL {
            self.stack.push(n);
            n = self.tree.nodes[n as usize].left;
        }
    }
}

impl Iterator for Iter<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let n = self.stack.pop()?;
        let node = self.tree.nodes[n as usize];
        self.push_left(node.right);
        Some((node.start, node.size))
    }
}
