//! PyO3 glue: JSON in, JSON out. All validation and presentation lives in Python; all simulation in iosched-sim.

use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Run one simulation. `config_json` is a serialised `SimConfig`; returns a serialised `SimResult`.
/// `progress`, if given, is called with the fraction of simulated time done (0.0..=1.0) from time to time.
/// The GIL is released while simulating; Ctrl-C raises KeyboardInterrupt.
#[pyfunction]
#[pyo3(signature = (config_json, progress=None))]
fn simulate(py: Python<'_>, config_json: &str, progress: Option<Py<PyAny>>) -> PyResult<String> {
    let config: iosched_sim::SimConfig = serde_json::from_str(config_json)
        .map_err(|e| PyValueError::new_err(format!("simulator config: {e}")))?;
    let mut interrupted = false;
    let outcome = {
        let mut on_progress = |fraction: f64| -> bool {
            // Re-acquire the GIL briefly: report progress and check for Ctrl-C.
            Python::attach(|py| {
                if let Some(cb) = &progress {
                    if let Err(e) = cb.call1(py, (fraction,)) {
                        e.restore(py);
                    }
                }
                if py.check_signals().is_err() {
                    interrupted = true;
                }
            });
            !interrupted
        };
        py.detach(|| iosched_sim::simulate(&config, &mut on_progress))
    };
    if interrupted {
        return Err(PyKeyboardInterrupt::new_err("simulation interrupted"));
    }
    let result = outcome.map_err(PyValueError::new_err)?;
    serde_json::to_string(&result).map_err(|e| PyValueError::new_err(e.to_string()))
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
    let outcome = py.detach(|| iosched_sim::trace::summarize(path, format, lun, action));
    let value = match outcome {
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
    iosched_policy::by_name(name, 1).ok().map(|elevator| elevator.tunables())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers, m)?)?;
    m.add_function(wrap_pyfunction!(block_layers, m)?)?;
    m.add_function(wrap_pyfunction!(scheduler_registry, m)?)?;
    m.add_function(wrap_pyfunction!(trace_summary, m)?)?;
    m.add_function(wrap_pyfunction!(source_digest, m)?)?;
    m.add_function(wrap_pyfunction!(scheduler_tunables, m)?)?;
    Ok(())
}
