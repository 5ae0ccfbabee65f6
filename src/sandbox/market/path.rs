//! A token's path: a Brownian motion run on a random "trading time", built top-down so that its
//! value at any candle boundary is a deterministic function of (seed, token, time) and costs a
//! few dozen draws, not a walk from the beginning of time.
//!
//! The tree has one node per candle of every interval: a dyadic tree over whole weeks (week 0
//! starts on Monday 1969-12-29, so all boundaries are whole UTC weeks, days, 4 hours, hours,
//! quarter hours and 5 minutes), then each week splits into 7 days, a day into 6 four-hour
//! blocks, those into 4 hours, hours into 4 quarters and quarters into 3 five-minute steps.
//! Every interval's closes are therefore samples of one path: the 1h close at 14:00 is the 5m
//! close at 14:00.
//!
//! Each split does two things, with draws from a stream keyed by (level, node):
//! - it divides the node's trading time among its children (a multiplicative cascade), so busy
//!   and quiet stretches nest inside each other: volatility clusters, and volume (proportional to
//!   trading time) rises with it. Now and then one child of an hour or a quarter takes most of
//!   the time: a burst, seen as a jump in the price;
//! - it draws the path at the inner boundaries as a Brownian bridge between the node's two ends
//!   (the Lévy construction), so every level agrees with the one above.
//!
//! Above 64 weeks the trading time is split evenly, so a calendar year is about a trading year.

use super::super::random::{splitmix, stable_hash};
use crate::model::INTERVAL_MS;

/// A point of the path at a candle boundary.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Trading time since week 0, in years.
    pub time: f64,
    /// A standard Brownian motion at that trading time.
    pub level: f64,
}

/// Week 0 starts on Monday 1969-12-29T00:00:00Z.
pub const WEEK0_MS: i64 = -3 * 86_400_000;
/// Candle length at each level of the tree: week, day, 4 hours, hour, 15 minutes, 5 minutes (the
/// model's intervals, longest first).
pub const LEVEL_MS: [i64; 6] = {
    let mut levels = [0; 6];
    let mut level = 0;
    while level < levels.len() {
        levels[level] = INTERVAL_MS[INTERVAL_MS.len() - 1 - level];
        level += 1;
    }
    levels
};
/// The finest level (5 minutes).
pub const FINEST: usize = LEVEL_MS.len() - 1;
/// Children of a node at each level above the finest.
const CHILDREN: [usize; FINEST] = [7, 6, 4, 4, 3];
const MOST_CHILDREN: usize = 7;
/// The dyadic tree over weeks spans 2^14 weeks: 1969 to 2284.
const WEEK_TREE_DEPTH: u32 = 14;
pub const WEEKS_IN_TREE: i64 = 1 << WEEK_TREE_DEPTH;
const YEARS_PER_WEEK: f64 = 7.0 / 365.25;
const EVEN_SPLIT_ABOVE_WEEKS: i64 = 64;
/// Share of hour and quarter-hour nodes in which one child takes a burst of trading time.
const BURST_CHANCE: f64 = 0.01;
const BURST_WEIGHT: f64 = 12.0;

/// Draws for one node of the tree.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix(self.0)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// About standard normal: the sum of four uniforms (from one 64-bit draw), centred and scaled
    /// to unit variance. Its tails stop at 3.46 sigma; the bursts supply the rare large moves,
    /// and it costs a few nanoseconds where a Box-Muller draw costs tens.
    fn normal(&mut self) -> f64 {
        let bits = self.next();
        let sum: u64 = (0..4).map(|i| (bits >> (16 * i)) & 0xffff).sum();
        (sum as f64 / 65_536.0 - 2.0) * 3f64.sqrt()
    }
}

pub struct Path {
    key: u64,
}

impl Path {
    pub fn new(seed: u64, token: &str) -> Path {
        Path { key: stable_hash(seed, &[token.as_bytes(), b"path"]) }
    }

    fn stream(&self, kind: u64, index: i64) -> Stream {
        Stream(splitmix(self.key ^ splitmix(kind << 48 ^ index as u64)))
    }

    /// The path at the boundaries `first..=last` of `level` (boundary `i` is at
    /// `WEEK0_MS + i * LEVEL_MS[level]`). Callers keep `0 <= first <= last` and the last
    /// boundary inside the tree.
    pub fn boundaries(&self, level: usize, first: i64, last: i64) -> Vec<Point> {
        debug_assert!(0 <= first && first <= last);
        if level == 0 {
            return self.weeks(first, last);
        }
        let children = CHILDREN[level - 1] as i64;
        let parent_first = first.div_euclid(children);
        let parent_last = (last + children - 1).div_euclid(children);
        let parents = self.boundaries(level - 1, parent_first, parent_last);
        let mut out = Vec::with_capacity((last - first + 1) as usize);
        for (offset, ends) in parents.windows(2).enumerate() {
            let node = parent_first + offset as i64;
            let (inner, count) = self.split(level - 1, node, ends[0], ends[1]);
            for (child, point) in inner[..count].iter().enumerate() {
                let index = node * children + child as i64;
                if (first..=last).contains(&index) {
                    out.push(*point);
                }
            }
        }
        if last == parent_last * children {
            out.extend(parents.last().copied());
        }
        out
    }

    /// The point at one boundary.
    pub fn at(&self, level: usize, index: i64) -> Point {
        self.boundaries(level, index, index)[0]
    }

    /// Draws a high and a low excursion (standard half-normal scale) for a candle.
    pub fn excursions(&self, level: usize, index: i64) -> (f64, f64) {
        let mut stream = self.stream(20 + level as u64, index);
        (stream.normal().abs(), stream.normal().abs())
    }

    /// The node's start and its inner boundaries (`count` points, the start first), splitting
    /// its trading time among its children and bridging the path between its ends.
    fn split(&self, level: usize, node: i64, start: Point, end: Point) -> ([Point; MOST_CHILDREN], usize) {
        let children = CHILDREN[level];
        let mut stream = self.stream(1 + level as u64, node);
        let mut weights = [0.0; MOST_CHILDREN];
        for weight in &mut weights[..children] {
            *weight = 0.5 + stream.unit();
        }
        if level >= 3 && stream.unit() < BURST_CHANCE {
            let burst = (stream.next() % children as u64) as usize;
            weights[burst] *= BURST_WEIGHT;
        }
        let total_weight: f64 = weights[..children].iter().sum();
        let duration = end.time - start.time;
        let mut points = [start; MOST_CHILDREN];
        let mut elapsed_weight = 0.0;
        for child in 1..children {
            elapsed_weight += weights[child - 1];
            let previous = points[child - 1];
            let time = start.time + duration * elapsed_weight / total_weight;
            points[child] = Point { time, level: bridge(previous, end, time, stream.normal()) };
        }
        (points, children)
    }

    fn weeks(&self, first: i64, last: i64) -> Vec<Point> {
        let end_time = WEEKS_IN_TREE as f64 * YEARS_PER_WEEK;
        let start = Point { time: 0.0, level: 0.0 };
        let end = Point { time: end_time, level: end_time.sqrt() * self.stream(0, 0).normal() };
        let mut out = Vec::with_capacity((last - first + 1) as usize);
        self.fill_weeks(0, WEEKS_IN_TREE, start, end, first, last, &mut out);
        if last == WEEKS_IN_TREE {
            out.push(end);
        }
        out
    }

    /// In-order walk of the dyadic week tree, visiting only nodes that touch `first..=last`.
    #[allow(clippy::too_many_arguments)]
    fn fill_weeks(&self, low: i64, high: i64, start: Point, end: Point, first: i64, last: i64, out: &mut Vec<Point>) {
        if high < first || low > last {
            return;
        }
        if high - low == 1 {
            if low >= first {
                out.push(start);
            }
            return;
        }
        let middle = (low + high) / 2;
        let mut stream = self.stream(7, low << 16 | i64::from((high - low).trailing_zeros() as u8));
        let share = if high - low > EVEN_SPLIT_ABOVE_WEEKS { 0.5 } else { 0.35 + 0.3 * stream.unit() };
        let time = start.time + share * (end.time - start.time);
        let point = Point { time, level: bridge(start, end, time, stream.normal()) };
        self.fill_weeks(low, middle, start, point, first, last, out);
        self.fill_weeks(middle, high, point, end, first, last, out);
    }
}

/// A Brownian bridge from `from` to `to`, sampled at trading time `time` with the normal draw `z`.
fn bridge(from: Point, to: Point, time: f64, z: f64) -> f64 {
    let remaining = to.time - from.time;
    if remaining <= 0.0 {
        return to.level;
    }
    let step = time - from.time;
    let fraction = step / remaining;
    from.level + fraction * (to.level - from.level) + (step * (remaining - step) / remaining).max(0.0).sqrt() * z
}

/// The index of the last boundary of `level` at or before `ms`.
pub fn last_boundary(level: usize, ms: i64) -> i64 {
    (ms - WEEK0_MS).div_euclid(LEVEL_MS[level])
}

/// The time of boundary `index` of `level`.
pub fn boundary_ms(level: usize, index: i64) -> i64 {
    WEEK0_MS + index * LEVEL_MS[level]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_samples_the_same_path() {
        let path = Path::new(3, "bitcoin");
        let day = last_boundary(1, 1_790_000_000_000);
        let days = path.boundaries(1, day - 10, day);
        assert_eq!(days.len(), 11);
        for (offset, point) in days.iter().enumerate() {
            let index = day - 10 + offset as i64;
            let ms = boundary_ms(1, index);
            for (level, length) in LEVEL_MS.iter().enumerate() {
                if (ms - WEEK0_MS) % length == 0 {
                    assert_eq!(path.at(level, last_boundary(level, ms)), *point, "level {level}");
                }
            }
        }
        let fine = path.boundaries(FINEST, 5_000_000, 5_000_700);
        assert_eq!(fine.len(), 701);
        assert!(fine.windows(2).all(|pair| pair[1].time > pair[0].time));
        assert_eq!(fine[350], path.at(FINEST, 5_000_350));
    }

    #[test]
    fn increments_have_unit_variance_per_trading_year() {
        let path = Path::new(0, "coin");
        let points = path.boundaries(FINEST, 6_000_000, 6_020_000);
        let (mut squares, mut time) = (0.0, 0.0);
        for pair in points.windows(2) {
            squares += (pair[1].level - pair[0].level).powi(2);
            time += pair[1].time - pair[0].time;
        }
        let ratio = squares / time;
        assert!((0.8..1.25).contains(&ratio), "{ratio}");
        // Two months of 5-minute steps are about two months of trading time.
        assert!((0.05..0.4).contains(&time), "{time}");
    }

    #[test]
    fn different_tokens_and_seeds_move_differently() {
        let a = Path::new(0, "a").at(FINEST, 6_000_000);
        assert_ne!(a, Path::new(0, "b").at(FINEST, 6_000_000));
        assert_ne!(a, Path::new(1, "a").at(FINEST, 6_000_000));
        assert_eq!(a, Path::new(0, "a").at(FINEST, 6_000_000));
    }
}
