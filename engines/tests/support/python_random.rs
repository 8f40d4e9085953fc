//! Python's `random.shuffle` after `random.seed(n)`: MT19937 seeded by `init_by_array` from the
//! seed's 32-bit words, `_randbelow` by rejection on `getrandbits`. Only the SGLang oracle needs
//! it, to follow the `random` policy's shuffles as CPython made them.

use blis_engines::sglang::scheduler::{QueueShuffle, RequestId};

#[derive(Debug)]
pub struct PythonRandom {
    state: [u32; 624],
    index: usize,
}

impl PythonRandom {
    /// `random.seed(seed)` for a non-negative integer below 2^32.
    pub fn seeded(seed: u32) -> Self {
        let mut rng = Self { state: [0; 624], index: 624 };
        rng.init_genrand(19_650_218);
        let key = [seed];
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..624usize.max(key.len()) {
            let prev = rng.state[i - 1] ^ (rng.state[i - 1] >> 30);
            rng.state[i] =
                (rng.state[i] ^ prev.wrapping_mul(1_664_525)).wrapping_add(key[j]).wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= 624 {
                rng.state[0] = rng.state[623];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..623 {
            let prev = rng.state[i - 1] ^ (rng.state[i - 1] >> 30);
            rng.state[i] = (rng.state[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= 624 {
                rng.state[0] = rng.state[623];
                i = 1;
            }
        }
        rng.state[0] = 0x8000_0000;
        rng
    }

    fn init_genrand(&mut self, seed: u32) {
        self.state[0] = seed;
        for i in 1..624 {
            let prev = self.state[i - 1] ^ (self.state[i - 1] >> 30);
            self.state[i] = prev.wrapping_mul(1_812_433_253).wrapping_add(i as u32);
        }
        self.index = 624;
    }

    fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            for k in 0..624 {
                let y = (self.state[k] & 0x8000_0000) | (self.state[(k + 1) % 624] & 0x7fff_ffff);
                let mut v = self.state[(k + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.state[k] = v;
            }
            self.index = 0;
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `_randbelow(n)` for 0 < n ≤ 2^32.
    pub fn below(&mut self, n: u64) -> u64 {
        let bits = 64 - n.leading_zeros();
        loop {
            let r = u64::from(self.next_u32() >> (32 - bits));
            if r < n {
                return r;
            }
        }
    }
}

impl QueueShuffle for PythonRandom {
    fn shuffle(&mut self, queue: &mut [RequestId]) {
        for i in (1..queue.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            queue.swap(i, j);
        }
    }
}
