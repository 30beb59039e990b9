//! Hash maps keyed by small integers (request ids, queue and group indices): a multiply-rotate hasher instead of the
//! standard SipHash, which is built to resist chosen keys and costs hundreds of instructions per lookup. The keys
//! here come from the simulator's own counters, so there is nothing to resist, and the hasher has no random seed:
//! maps behave the same on every run. (Nothing may depend on a map's iteration order anyway.)

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A `HashSet` with [`IdHasher`].
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// Each word is mixed in by a rotate, an xor and a multiply by 2^64 / phi (Fibonacci hashing); the high bits then
/// depend on every input bit, which is what `HashMap`'s SwissTable uses to pick a group and tag.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl IdHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// A map from dense ids to values: a `Vec` indexed by the id, grown on insert. For ids that are indices the
/// simulator reuses (a request's id is its I/O slot, and slots are recycled), so the vector stays as long as the
/// most I/Os ever in flight; a lookup is one load where a hash map's is a hash, a probe and a compare. The API is
/// `HashMap`'s where the schedulers use it (keys by reference), so a map keyed by request id can switch to it
/// without touching its callers; its keys come out in ascending order.
#[derive(Clone, Debug)]
pub struct DenseMap<V> {
    values: Vec<Option<V>>,
    len: usize,
}

impl<V> Default for DenseMap<V> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            len: 0,
        }
    }
}

impl<V> DenseMap<V> {
    /// Set `id`'s value; returns the one it replaces.
    #[inline]
    pub fn insert(&mut self, id: u32, value: V) -> Option<V> {
        let i = id as usize;
        if i >= self.values.len() {
            self.values.resize_with(i + 1, || None);
        }
        let old = self.values[i].replace(value);
        self.len += old.is_none() as usize;
        old
    }

    #[inline]
    pub fn get(&self, id: &u32) -> Option<&V> {
        self.values.get(*id as usize).and_then(Option::as_ref)
    }

    #[inline]
    pub fn get_mut(&mut self, id: &u32) -> Option<&mut V> {
        self.values.get_mut(*id as usize).and_then(Option::as_mut)
    }

    #[inline]
    pub fn contains_key(&self, id: &u32) -> bool {
        self.get(id).is_some()
    }

    #[inline]
    pub fn remove(&mut self, id: &u32) -> Option<V> {
        let old = self.values.get_mut(*id as usize).and_then(Option::take);
        self.len -= old.is_some() as usize;
        old
    }

    /// The ids present, ascending.
    pub fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        (0u32..)
            .zip(&self.values)
            .filter_map(|(id, v)| v.as_ref().map(|_| id))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<V> std::ops::Index<&u32> for DenseMap<V> {
    type Output = V;

    #[inline]
    fn index(&self, id: &u32) -> &V {
        self.get(id).expect("no value for this id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash<T: std::hash::Hash>(value: T) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(value)
    }

    #[test]
    fn the_same_key_hashes_the_same_on_every_run_and_neighbours_differ_in_the_high_bits() {
        // No random seed: a fixed value (0 rotated, xor 1, times K).
        assert_eq!(hash(1u32), K);
        // Consecutive request ids land in different SwissTable groups (the top 7 bits are the tag).
        let tops: HashSet<u64> = (0u32..64).map(|id| hash(id) >> 57).collect();
        assert!(tops.len() > 32, "{} distinct tags for 64 ids", tops.len());
    }

    #[test]
    fn a_map_keyed_by_ids_behaves_as_the_standard_one() {
        let mut ids: IdMap<u32, u32> = IdMap::default();
        let mut std: HashMap<u32, u32> = HashMap::new();
        for i in 0..10_000u32 {
            let key = i.wrapping_mul(2_654_435_761) % 5_000;
            *ids.entry(key).or_default() += i;
            *std.entry(key).or_default() += i;
            if i % 3 == 0 {
                assert_eq!(ids.remove(&(key / 2)), std.remove(&(key / 2)));
            }
        }
        assert_eq!(ids.len(), std.len());
        assert!(std.iter().all(|(k, v)| ids.get(k) == Some(v)));
    }

    #[test]
    fn a_dense_map_behaves_as_the_standard_one() {
        let mut dense: DenseMap<u32> = DenseMap::default();
        let mut std: HashMap<u32, u32> = HashMap::new();
        for i in 0..10_000u32 {
            let key = i.wrapping_mul(2_654_435_761) % 5_000;
            assert_eq!(dense.insert(key, i), std.insert(key, i));
            if i % 3 == 0 {
                assert_eq!(dense.remove(&(key / 2)), std.remove(&(key / 2)));
            }
            if i % 7 == 0 {
                if let Some(v) = dense.get_mut(&key) {
                    *v += 1;
                    *std.get_mut(&key).unwrap() += 1;
                }
            }
        }
        assert_eq!(dense.remove(&1_000_000), None); // beyond the vector: absent, not a panic
        assert!(!dense.contains_key(&1_000_000));
        assert_eq!(dense.len(), std.len());
        assert!((0..5_000).all(|k| dense.get(&k) == std.get(&k)));
        let mut keys: Vec<u32> = std.keys().copied().collect();
        keys.sort_unstable();
        assert_eq!(dense.keys().collect::<Vec<_>>(), keys);
        assert!(keys.iter().all(|k| dense[k] == std[k]));
    }
}
