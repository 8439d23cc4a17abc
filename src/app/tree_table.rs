//! A declared tree as a table, for `ringvisor check`: one row per child, indented under its supervisor,
//! with what starts it, its restart type, shutdown, registry name and placement.

use std::fmt::Write;

use crate::supervisor::{ChildSpec, ChildStart, SupervisorSpec};

/// The table of `spec`, a header row first, then a summary line (children by kind; the GPU slots the tree
/// takes when it starts).
pub fn tree_table(spec: &SupervisorSpec) -> String {
    let mut rows = vec![["CHILD", "STARTS", "RESTART", "SHUTDOWN", "NAME", "PLACE"].map(String::from)];
    rows.push(["(root)".into(), supervisor_kind(spec), "-".into(), "-".into(), "-".into(), String::new()]);
    let mut count = Counts::default();
    add_children(spec, 1, &mut rows, &mut count);
    let widths: Vec<usize> = (0..6).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{}: {} GPU, {}, {}; {} taken at start{}",
        plural(count.gpu + count.actors + count.supervisors, "child", "children"),
        count.gpu,
        plural(count.actors, "host actor", "host actors"),
        plural(count.supervisors, "supervisor", "supervisors"),
        plural(count.gpu, "GPU slot", "GPU slots"),
        if count.dynamic > 0 { ", more as simple_one_for_one children are started" } else { "" }
    );
    out
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[derive(Default)]
struct Counts {
    gpu: usize,
    actors: usize,
    supervisors: usize,
    /// simple_one_for_one templates (their children come later).
    dynamic: usize,
}

fn add_children(spec: &SupervisorSpec, depth: usize, rows: &mut Vec<[String; 6]>, count: &mut Counts) {
    let dynamic = spec.strategy == crate::supervisor::Strategy::SimpleOneForOne;
    if dynamic {
        count.dynamic += 1;
    }
    for child in &spec.children {
        let id = format!("{:indent$}{}{}", "", child.id, if dynamic { " (template)" } else { "" }, indent = depth * 2);
        let (starts, place) = match &child.start {
            ChildStart::Gpu(g) => {
                if !dynamic {
                    count.gpu += 1;
                }
                let mut place = g.wanted_placement().label();
                if let Some(slot) = g.wanted_slot() {
                    let _ = write!(place, ", slot {slot}");
                }
                if g.fails_over() {
                    place.push_str(", failover");
                }
                (format!("gpu {}", g.behaviour()), place)
            }
            ChildStart::Actor(_) => {
                count.actors += usize::from(!dynamic);
                ("actor".to_string(), String::new())
            }
            ChildStart::Supervisor(nested) => {
                count.supervisors += usize::from(!dynamic);
                (supervisor_kind(nested), String::new())
            }
        };
        rows.push([
            id,
            starts,
            restart(child),
            child.shutdown.label(),
            child.name.clone().unwrap_or("-".into()),
            place,
        ]);
        if let ChildStart::Supervisor(nested) = &child.start {
            add_children(nested, depth + 1, rows, count);
        }
    }
}

/// `supervisor one_for_one, 3 in 5s` (its strategy and restart intensity).
fn supervisor_kind(spec: &SupervisorSpec) -> String {
    let mut kind = format!("supervisor {}, {} in {:?}", spec.strategy.label(), spec.intensity, spec.period);
    if spec.auto_shutdown != Default::default() {
        let _ = write!(kind, ", auto_shutdown {}", spec.auto_shutdown.label());
    }
    kind
}

/// The restart type, and what else changes a restart: significant, backoff.
fn restart(child: &ChildSpec) -> String {
    let mut r = child.restart.label().to_string();
    if child.significant {
        r.push_str(", significant");
    }
    if let Some(b) = &child.backoff {
        let _ = write!(r, ", backoff {:?} to {:?}", b.initial, b.max);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::{GpuChild, Restart, Strategy};
    use std::time::Duration;

    #[test]
    fn each_child_is_a_row_under_its_supervisor() {
        let workers = SupervisorSpec::new(Strategy::RestForOne)
            .intensity(3, Duration::from_secs(5))
            .child(ChildSpec::gpu("w0", GpuChild::new("echo").device(1).slot(4)).name("app/w0"));
        let spec = SupervisorSpec::new(Strategy::OneForOne)
            .child(ChildSpec::gpu("totals", GpuChild::new("counter")).restart(Restart::Transient))
            .child(ChildSpec::supervisor("workers", workers));
        let table = tree_table(&spec);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("CHILD") && lines[0].contains("SHUTDOWN"), "{table}");
        assert!(lines[1].starts_with("(root)") && lines[1].contains("supervisor one_for_one, 1 in 5s"), "{table}");
        assert!(lines[2].starts_with("  totals") && lines[2].contains("gpu counter"), "{table}");
        assert!(lines[2].contains("transient") && lines[2].contains("5000 ms"), "{table}");
        assert!(lines[3].contains("supervisor rest_for_one, 3 in 5s") && lines[3].contains("infinity"), "{table}");
        assert!(lines[4].starts_with("    w0") && lines[4].contains("app/w0"), "{table}");
        assert!(lines[4].contains("device 1, slot 4"), "{table}");
        assert!(
            table.contains("3 children: 2 GPU, 0 host actors, 1 supervisor; 2 GPU slots taken at start"),
            "{table}"
        );
        assert!(!table.contains("Some(") && !table.contains("Timeout("), "no Debug output: {table}");
    }
}
