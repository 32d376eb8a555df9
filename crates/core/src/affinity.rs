//! Resetting a thread's CPU affinity to the process's cgroup cpuset.
//!
//! A thread may inherit a narrowed affinity (an OpenMP runtime or a parent
//! process pinned it); an engine created on it would then compute on fewer
//! cores than the container allows. Before an engine is created, the
//! engine thread's affinity is reset to the cgroup's effective cpuset
//! (cgroup v2 `cpuset.cpus.effective`, then v1 `cpuset.cpus`), on Linux.
//! Elsewhere this does nothing.

use std::path::{Path, PathBuf};

/// Parses a cpuset list such as `0-3,8,10-11` into sorted CPU numbers.
///
/// Returns `None` for anything malformed (or empty).
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
                if lo > hi {
                    return None;
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// The files that may hold the process's cpuset, most specific first:
/// cgroup v2 (the process's own group, then the root), then cgroup v1.
fn cpuset_candidates(proc_self_cgroup: &str, root: &Path) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    for line in proc_self_cgroup.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            let rel = path.trim().trim_start_matches('/');
            if !rel.is_empty() {
                candidates.push(root.join(rel).join("cpuset.cpus.effective"));
            }
        }
    }
    candidates.push(root.join("cpuset.cpus.effective"));
    candidates.push(root.join("cpuset/cpuset.effective_cpus"));
    candidates.push(root.join("cpuset/cpuset.cpus"));
    candidates
}

/// The CPUs the process's cgroup allows, read under `root` (normally
/// `/sys/fs/cgroup`), or `None` when no cpuset file is readable.
pub fn cgroup_cpus(root: &Path, proc_self_cgroup: &str) -> Option<Vec<usize>> {
    cpuset_candidates(proc_self_cgroup, root)
        .into_iter()
        .find_map(|path| parse_cpu_list(&std::fs::read_to_string(path).ok()?))
}

/// Resets the calling thread's CPU affinity to the cgroup's cpuset.
///
/// Returns the CPUs applied, or `None` when there was nothing to apply
/// (no cgroup cpuset, not Linux, or the system refused).
pub fn reset_thread_affinity() -> Option<Vec<usize>> {
    #[cfg(target_os = "linux")]
    {
        let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let cpus = cgroup_cpus(Path::new("/sys/fs/cgroup"), &proc_cgroup)?;
        let mut set = nix::sched::CpuSet::new();
        for &cpu in &cpus {
            set.set(cpu).ok()?;
        }
        match nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            Ok(()) => Some(cpus),
            Err(err) => {
                tracing::debug!(%err, "could not reset the engine thread's CPU affinity");
                None
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_with_ranges_and_singles_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn cgroup_v2_group_file_wins_then_root_then_v1() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("cpuset")).expect("mkdir");
        std::fs::write(root.join("cpuset/cpuset.cpus"), "0-7").expect("write");
        assert_eq!(cgroup_cpus(root, ""), Some((0..8).collect()));

        std::fs::write(root.join("cpuset.cpus.effective"), "0-3").expect("write");
        assert_eq!(cgroup_cpus(root, "0::/\n"), Some(vec![0, 1, 2, 3]));

        std::fs::create_dir_all(root.join("job")).expect("mkdir");
        std::fs::write(root.join("job/cpuset.cpus.effective"), "2,3").expect("write");
        assert_eq!(cgroup_cpus(root, "0::/job\n"), Some(vec![2, 3]));
    }

    #[test]
    fn no_cpuset_file_means_nothing_to_apply() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(cgroup_cpus(dir.path(), "0::/x\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reset_restores_every_allowed_cpu_after_narrowing() {
        std::thread::spawn(|| {
            let Some(allowed) = cgroup_cpus(
                Path::new("/sys/fs/cgroup"),
                &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
            ) else {
                return; // no cgroup cpuset on this machine: nothing to check
            };
            let mut one = nix::sched::CpuSet::new();
            one.set(allowed[0]).expect("cpu");
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).expect("narrow");
            let applied = reset_thread_affinity().expect("reset");
            let now = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("get");
            for cpu in applied {
                assert!(now.is_set(cpu).expect("cpu"), "cpu {cpu} not restored");
            }
        })
        .join()
        .expect("thread");
    }
}
