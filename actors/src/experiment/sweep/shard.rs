//! A sweep cut into shards: shard `I` of `N` runs the points whose index is `I` modulo `N`, so
//! the shares are fixed by the spec alone and together cover every point once.

use std::fmt;

use blis_contracts::FieldError;

/// One shard of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, from 0.
    pub index: u32,
    /// How many shards.
    pub count: u32,
}

/// The most shards a sweep may be cut into (a sweep holds at most this many points).
pub const MAX_SHARDS: u32 = super::spec::MAX_POINTS as u32;

impl Shard {
    /// A shard, refused at `path` unless `0 ≤ index < count ≤` [`MAX_SHARDS`].
    pub fn new(path: &str, index: u32, count: u32) -> Result<Shard, FieldError> {
        if count == 0 || count > MAX_SHARDS {
            return Err(FieldError::new(
                path,
                format!("{index}/{count}"),
                format!("the shard count must be 1 to {MAX_SHARDS}"),
            ));
        }
        if index >= count {
            return Err(FieldError::new(
                path,
                format!("{index}/{count}"),
                format!("the shard index must be 0 to {} (below the count)", count - 1),
            ));
        }
        Ok(Shard { index, count })
    }

    /// Read `I/N` (the `--shard` flag).
    pub fn parse(text: &str) -> Result<Shard, FieldError> {
        let parsed =
            text.split_once('/').and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
        let Some((index, count)) = parsed else {
            return Err(FieldError::new(
                "--shard",
                text,
                "expected I/N, two whole numbers (shard I of N, I from 0)",
            ));
        };
        Shard::new("--shard", index, count)
    }

    /// The shard a job-array task runs, from its environment (`var` gives the variable's value):
    /// Slurm's `SLURM_ARRAY_TASK_ID` (less `SLURM_ARRAY_TASK_MIN`) of `SLURM_ARRAY_TASK_COUNT`,
    /// or a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX` of `shards`. `None` outside a job
    /// array.
    pub fn from_environment(
        var: &dyn Fn(&str) -> Option<String>,
        shards: Option<u32>,
    ) -> Result<Option<Shard>, FieldError> {
        let number = |name: &str| -> Result<Option<u32>, FieldError> {
            var(name)
                .map(|v| {
                    v.trim().parse::<u32>().map_err(|_| FieldError::new(name, &v, "expected a whole number"))
                })
                .transpose()
        };
        if let Some(task) = number("SLURM_ARRAY_TASK_ID")? {
            let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let count = match (number("SLURM_ARRAY_TASK_COUNT")?, shards) {
                (Some(count), _) => count,
                (None, Some(shards)) => shards,
                (None, None) => {
                    return Err(FieldError::at("SLURM_ARRAY_TASK_COUNT", "unset: give --shards N"));
                }
            };
            let index = task.checked_sub(min).ok_or_else(|| {
                FieldError::new("SLURM_ARRAY_TASK_ID", task, format!("below SLURM_ARRAY_TASK_MIN = {min}"))
            })?;
            return Shard::new("SLURM_ARRAY_TASK_ID", index, count).map(Some);
        }
        match (number("JOB_COMPLETION_INDEX")?, shards) {
            (Some(index), Some(count)) => Shard::new("JOB_COMPLETION_INDEX", index, count).map(Some),
            (Some(index), None) => {
                Err(FieldError::new("JOB_COMPLETION_INDEX", index, "give --shards N (the Job's completions)"))
            }
            (None, Some(count)) => Err(FieldError::new(
                "--shards",
                count,
                "neither --shard nor a job array's index (SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX) is set",
            )),
            (None, None) => Ok(None),
        }
    }

    /// Whether point `index` is this shard's.
    pub fn owns(&self, index: usize) -> bool {
        index % self.count as usize == self.index as usize
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn shards_cover_every_point_once() {
        let shards: Vec<Shard> = (0..4).map(|i| Shard::new("--shard", i, 4).unwrap()).collect();
        for point in 0..23 {
            assert_eq!(shards.iter().filter(|s| s.owns(point)).count(), 1);
        }
        assert!(shards[1].owns(5) && !shards[1].owns(6));
    }

    #[test]
    fn a_shard_out_of_range_is_refused_by_flag_value_and_cause() {
        let e = Shard::parse("4/4").unwrap_err();
        assert_eq!(e.to_string(), "--shard = 4/4: the shard index must be 0 to 3 (below the count)");
        assert_eq!(Shard::parse("0/0").unwrap_err().path, "--shard");
        assert!(Shard::parse("1-4").unwrap_err().cause.contains("expected I/N"));
        assert_eq!(Shard::parse("3/4").unwrap(), Shard { index: 3, count: 4 });
    }

    #[test]
    fn job_arrays_name_the_shard() {
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(Shard::from_environment(&slurm, None).unwrap(), Some(Shard { index: 2, count: 4 }));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "1")]);
        assert_eq!(Shard::from_environment(&k8s, Some(3)).unwrap(), Some(Shard { index: 1, count: 3 }));
        assert_eq!(Shard::from_environment(&k8s, None).unwrap_err().path, "JOB_COMPLETION_INDEX");
        let late = env(&[("JOB_COMPLETION_INDEX", "5")]);
        assert_eq!(Shard::from_environment(&late, Some(3)).unwrap_err().path, "JOB_COMPLETION_INDEX");
        assert_eq!(Shard::from_environment(&env(&[]), None).unwrap(), None);
        assert_eq!(Shard::from_environment(&env(&[]), Some(2)).unwrap_err().path, "--shards");
    }
}
