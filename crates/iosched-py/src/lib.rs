//! PyO3 glue: JSON in, JSON out. All validation and presentation lives in Python; all simulation in iosched-sim.
//!
//! Interruption: long calls release the GIL and come back for it now and then to run Python's signal handlers
//! (`check_signals`). Whatever those raise (KeyboardInterrupt, or the `iosched.interrupt.Interrupted` the CLI's
//! handlers raise for SIGINT/SIGTERM/SIGHUP), and whatever a progress callback raises, stops the call at once and is
//! raised from it unchanged: never restored and carried on with, which left an exception set while the simulation
//! went on (Python then failed with chains of SystemError).

use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    _native,
    SimulatorPanic,
    PyException,
    "The simulator panicked: a bug in iosched (any input should give a clear error instead)."
);

/// A panic's message, as an exception Python reports in one line.
fn panic_error(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    SimulatorPanic::new_err(message)
}

/// Re-acquire the GIL to run Python's signal handlers; the exception one raises is kept in `pending`.
fn check_signals(pending: &mut Option<PyErr>) -> bool {
    if pending.is_none() {
        Python::attach(|py| {
            if let Err(e) = py.check_signals() {
                *pending = Some(e);
            }
        });
    }
    pending.is_none()
}

/// Run one simulation. `config_json` is a serialised `SimConfig`; returns a serialised `SimResult`.
/// `progress`, if given, is called with the fraction of simulated time done (0.0..=1.0) from time to time.
/// The GIL is released while simulating; a signal handler's exception (KeyboardInterrupt) or one the progress
/// callback raises stops the simulation and is raised from here.
#[pyfunction]
#[pyo3(signature = (config_json, progress=None))]
fn simulate(py: Python<'_>, config_json: &str, progress: Option<Py<PyAny>>) -> PyResult<String> {
    let config: iosched_sim::SimConfig = serde_json::from_str(config_json)
        .map_err(|e| PyValueError::new_err(format!("simulator config: {e}")))?;
    let mut pending: Option<PyErr> = None;
    let outcome = {
        let mut on_progress = |fraction: f64| -> bool {
            // Re-acquire the GIL briefly: report progress, then run the signal handlers. The first exception ends
            // the run (returning false makes the simulator stop at once).
            if pending.is_none() {
                if let Some(cb) = &progress {
                    Python::attach(|py| {
                        if let Err(e) = cb.call1(py, (fraction,)) {
                            pending = Some(e);
                        }
                    });
                }
            }
            check_signals(&mut pending)
        };
        py.detach(|| {
            catch_unwind(AssertUnwindSafe(|| {
                iosched_sim::simulate(&config, &mut on_progress)
            }))
        })
    };
    if let Some(e) = pending {
        return Err(e);
    }
    let result = outcome
        .map_err(panic_error)?
        .map_err(PyValueError::new_err)?;
    serde_json::to_string(&result).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A buffered reader that runs Python's signal handlers every `CHECK_BYTES` it hands out: a long trace read stops
/// within a moment of Ctrl-C. An exception from a handler ends the read with an I/O error (the caller then raises
/// the exception, not the error).
struct Interruptible<'a, R> {
    inner: R,
    since_check: usize,
    pending: &'a mut Option<PyErr>,
}

const CHECK_BYTES: usize = 4 << 20;

impl<R: BufRead> Read for Interruptible<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = {
            let available = self.fill_buf()?;
            let n = available.len().min(buf.len());
            buf[..n].copy_from_slice(&available[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Interruptible<'_, R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.since_check >= CHECK_BYTES {
            self.since_check = 0;
            if !check_signals(self.pending) {
                return Err(io::Error::other("interrupted"));
            }
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.since_check += amount;
        self.inner.consume(amount)
    }
}

impl<R: Seek> Seek for Interruptible<'_, R> {
    fn seek(&mut self, position: SeekFrom) -> io::Result<u64> {
        self.inner.seek(position)
    }
}

/// Read a whole trace as a replay of it would (the simulator's own parser and selection) and total it up.
/// Returns JSON: `{"summary": {...}}` (see `iosched_sim::trace::TraceSummary`), or `{"error": {"line": N or null,
/// "message": "..."}}` for bad input, which Python reports with the file and line. The GIL is released meanwhile.
#[pyfunction]
#[pyo3(signature = (path, format=None, lun=None, blkparse_action="D"))]
fn trace_summary(
    py: Python<'_>,
    path: &str,
    format: Option<&str>,
    lun: Option<&str>,
    blkparse_action: &str,
) -> PyResult<String> {
    use iosched_sim::config::{BlkparseAction, TraceFormat};
    let format = match format {
        None => None,
        Some("systor17") => Some(TraceFormat::Systor17),
        Some("msr") => Some(TraceFormat::Msr),
        Some("blkparse") => Some(TraceFormat::Blkparse),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "unknown trace format {other:?}"
            )))
        }
    };
    let action = match blkparse_action {
        "D" => BlkparseAction::D,
        "Q" => BlkparseAction::Q,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown blkparse action {other:?}"
            )))
        }
    };
    let mut pending: Option<PyErr> = None;
    let outcome = py.detach(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let file = std::fs::File::open(path).map_err(|e| iosched_sim::trace::TraceError {
                path: path.into(),
                line: None,
                message: format!("cannot open: {e}"),
            })?;
            let input = Interruptible {
                inner: io::BufReader::with_capacity(1 << 16, file),
                since_check: 0,
                pending: &mut pending,
            };
            let mut reader =
                iosched_sim::trace::TraceReader::new(path, input, format, lun, action)?;
            iosched_sim::trace::summarize_reader(&mut reader)
        }))
    });
    if let Some(e) = pending {
        return Err(e);
    }
    let value = match outcome.map_err(panic_error)? {
        Ok(summary) => serde_json::json!({ "summary": summary }),
        Err(e) => serde_json::json!({ "error": { "line": e.line, "message": e.message } }),
    };
    Ok(value.to_string())
}

/// The simulator's version (part of every run id).
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// A digest of the simulator's sources (see build.rs): with the version, the code version in every run id.
#[pyfunction]
fn source_digest() -> &'static str {
    env!("IOSCHED_SOURCE_DIGEST")
}

/// Scheduler names the simulator accepts, as users type them.
#[pyfunction]
fn schedulers() -> Vec<&'static str> {
    iosched_sim::SCHEDULERS.to_vec()
}

/// The scheduler registry (iosched-policy's `REGISTRY`), one dict per scheduler in listing order: `name`,
/// `block_layers` (default first), `kernel` ("mainline": the kernel backend can select it; "simulator-only"),
/// `description`, and `elevator` (false for `none`, which runs no scheduler hooks and has no scheduler costs).
#[pyfunction]
fn scheduler_registry(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    iosched_policy::REGISTRY
        .iter()
        .map(|s| {
            let row = PyDict::new(py);
            row.set_item("name", s.name)?;
            let layers: Vec<&str> = s.block_layers.iter().map(|l| l.name()).collect();
            row.set_item("block_layers", layers)?;
            row.set_item("kernel", s.kernel.name())?;
            row.set_item("description", s.description)?;
            row.set_item("elevator", s.is_elevator())?;
            Ok(row)
        })
        .collect()
}

/// The block layers a scheduler runs on, its default first ("blk-mq", "legacy"); None for an unknown name.
#[pyfunction]
fn block_layers(name: &str) -> Option<Vec<&'static str>> {
    iosched_policy::block_layers(name).map(|layers| layers.iter().map(|l| l.name()).collect())
}

/// A scheduler's tunables (sysfs name, default value) as the simulator has them; None for an unknown name.
#[pyfunction]
fn scheduler_tunables(name: &str) -> Option<Vec<(&'static str, i64)>> {
    iosched_policy::by_name(name, 1)
        .ok()
        .map(|elevator| elevator.tunables())
}

/// How many time-series metrics a scheduler reports per device and sample (its introspection, before any cgroup
/// is known); None for an unknown name. Python bounds a run's time-series values with it before the run.
#[pyfunction]
fn scheduler_metrics(name: &str) -> Option<usize> {
    iosched_policy::by_name(name, 1)
        .ok()
        .map(|elevator| elevator.introspect().len())
}

/// The first of `tunables` (sysfs name, value), set in order as a run sets them, that scheduler `name` refuses:
/// (tunable, why), or None when it takes them all (or the name is unknown: Python checks names first). Python names
/// the spec's file and key with it before anything runs.
#[pyfunction]
fn tunable_error(name: &str, tunables: Vec<(String, i64)>) -> Option<(String, String)> {
    let mut elevator = iosched_policy::by_name(name, 1).ok()?;
    for (tunable, value) in tunables {
        if let Err(e) = elevator.set_tunable(&tunable, value) {
            return Some((tunable, e.to_string()));
        }
    }
    None
}

/// Every modelled kernel change (iosched-policy's `kernel::CHANGES`, oldest first), one dict each: `since`
/// ("MAJOR.MINOR"), `commit`, `title`, `behaviour` and `backports` (stable releases known to carry it).
#[pyfunction]
fn kernel_changes(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    iosched_policy::kernel::CHANGES
        .iter()
        .map(|c| {
            let row = PyDict::new(py);
            row.set_item("since", c.since.to_string())?;
            row.set_item("commit", c.commit)?;
            row.set_item("title", c.title)?;
            row.set_item("behaviour", c.behaviour)?;
            let backports: Vec<String> = c.backports.iter().map(|b| b.to_string()).collect();
            row.set_item("backports", backports)?;
            Ok(row)
        })
        .collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SimulatorPanic", m.py().get_type::<SimulatorPanic>())?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers, m)?)?;
    m.add_function(wrap_pyfunction!(block_layers, m)?)?;
    m.add_function(wrap_pyfunction!(scheduler_registry, m)?)?;
    m.add_function(wrap_pyfunction!(trace_summary, m)?)?;
    m.add_function(wrap_pyfunction!(source_digest, m)?)?;
    m.add_function(wrap_pyfunction!(scheduler_tunables, m)?)?;
    m.add_function(wrap_pyfunction!(scheduler_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(tunable_error, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_changes, m)?)?;
    Ok(())
}
