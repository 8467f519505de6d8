//! An operator's memory and CPU, read from the kernel for its container's main process.

use anyhow::Context;
use serde::Serialize;

/// One reading of a process.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Reading {
    /// Resident memory now.
    pub rss_bytes: u64,
    /// The most resident memory it has had since its peak was last reset ([`reset_peak`]).
    pub peak_rss_bytes: u64,
    /// The part of resident memory that is its own data (heap, stacks), not pages of its
    /// program file: what grows with what it holds.
    pub anonymous_bytes: u64,
    /// User and system CPU time since it started.
    pub cpu_seconds: f64,
    /// When it started, in clock ticks after boot: a reading of another process under the
    /// same PID (the container restarted) differs here.
    pub started_ticks: u64,
}

/// `VmRSS`, `VmHWM` and `RssAnon` of `/proc/PID/status`, in bytes.
pub fn memory(status: &str) -> anyhow::Result<(u64, u64, u64)> {
    let kibibytes = |field: &str| -> anyhow::Result<u64> {
        let value = status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .with_context(|| format!("no {field} in the process status"))?;
        let number = value.trim().trim_end_matches("kB").trim();
        Ok(number
            .parse::<u64>()
            .with_context(|| format!("{field} {value:?}"))?
            * 1024)
    };
    Ok((kibibytes("VmRSS:")?, kibibytes("VmHWM:")?, kibibytes("RssAnon:")?))
}

/// User plus system time and the start time of `/proc/PID/stat`, in clock ticks. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted from its closing
/// parenthesis.
pub fn cpu_and_start_ticks(stat: &str) -> anyhow::Result<(u64, u64)> {
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("no command name in the process stat")?;
    // After the name: state (3), ppid (4), ... utime (14), stime (15), ... starttime (22).
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |number: usize| -> anyhow::Result<u64> {
        fields
            .get(number - 3)
            .with_context(|| format!("no field {number} in the process stat"))?
            .parse()
            .with_context(|| format!("field {number} of the process stat"))
    };
    Ok((field(14)? + field(15)?, field(22)?))
}

/// Reads process `pid` now.
pub fn read(pid: u32, ticks_per_second: u64) -> anyhow::Result<Reading> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("/proc/{pid}/status"))?;
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("/proc/{pid}/stat"))?;
    let (rss_bytes, peak_rss_bytes, anonymous_bytes) = memory(&status)?;
    let (cpu_ticks, started_ticks) = cpu_and_start_ticks(&stat)?;
    Ok(Reading {
        rss_bytes,
        peak_rss_bytes,
        anonymous_bytes,
        cpu_seconds: cpu_ticks as f64 / ticks_per_second as f64,
        started_ticks,
    })
}

/// Resets process `pid`'s resident-memory high-water mark to its current resident memory, so
/// that the next peak read is of what happened since (not of its start-up).
pub fn reset_peak(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").with_context(|| format!("/proc/{pid}/clear_refs"))
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`).
pub fn ticks_per_second() -> anyhow::Result<u64> {
    let output = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("running getconf CLK_TCK")?;
    anyhow::ensure!(output.status.success(), "getconf CLK_TCK failed");
    Ok(String::from_utf8_lossy(&output.stdout).trim().parse()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_resident_memory_its_peak_and_its_anonymous_part_in_bytes() {
        let status = "Name:\tmanager\nVmPeak:\t 1300000 kB\nVmHWM:\t   41000 kB\nVmRSS:\t   39000 kB\n\
                      RssAnon:\t   12000 kB\nRssFile:\t   27000 kB\n";
        assert_eq!(
            memory(status).unwrap(),
            (39_000 * 1024, 41_000 * 1024, 12_000 * 1024)
        );
        assert!(memory("Name:\tmanager\n").is_err());
    }

    #[test]
    fn adds_user_and_system_time_and_reads_the_start_after_a_name_with_spaces() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        let stat = "4242 (etcd (op) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 12 0 100 1300000";
        assert_eq!(cpu_and_start_ticks(stat).unwrap(), (325, 100));
        assert!(cpu_and_start_ticks("4242 (manager) S 1").is_err());
    }
}
