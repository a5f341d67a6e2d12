//! Reading a scenario file: the TOML layer (every table
//! `deny_unknown_fields`) and its checks, keeping toml's byte spans so that
//! every error names the key and the line it is on.

use super::model::*;
use crate::calibration::Calibration;
use crate::cores::{CoreAllocSpec, CoreMgmtSpec};
use crate::napi::NapiSpec;
use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;
use vadapt_policy::vspace::{VspaceConfig, VspaceConfigError, VspaceMode};
use vadapt_policy::{Duration, PolicyConfig, PolicyKind};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    #[serde(default)]
    description: String,
    include: Option<Spanned<String>>,
    calibration: Option<Spanned<Calibration>>,
    duration_s: Spanned<f64>,
    #[serde(default)]
    seed: u64,
    sample_ms: Option<Spanned<f64>>,
    max_events_per_sim_s: Option<Spanned<i64>>,
    host: RawHost,
    vms: Vec<RawVm>,
    timeline: Spanned<Vec<RawTimeline>>,
    #[serde(default)]
    periods: Vec<Spanned<Period>>,
    sweep: Option<RawSweep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    cores: Spanned<i64>,
    line_rate_gbps: Option<Spanned<f64>>,
    nic_queue_packets: Option<Spanned<i64>>,
    sched_slice_us: Option<Spanned<f64>>,
    max_vcpus_per_core: Option<Spanned<i64>>,
    power: Option<Spanned<PowerModel>>,
    core_alloc: Option<Spanned<RawCoreAlloc>>,
    vcpu_sched: Option<Spanned<String>>,
    napi: Option<Spanned<NapiSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCoreAlloc {
    kind: Spanned<String>,
    mode: Option<Spanned<String>>,
    vcpu_cores: Option<Spanned<i64>>,
    nq_cores: Option<Spanned<i64>>,
    cores: Option<Spanned<i64>>,
    period_ms: Option<Spanned<f64>>,
    slo_us: Option<Spanned<f64>>,
    migration_us: Option<Spanned<f64>>,
    be_vm: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVm {
    name: Option<String>,
    count: Option<Spanned<i64>>,
    vcpus: Spanned<i64>,
    ring_size: Option<Spanned<i64>>,
    queues: Option<Spanned<i64>>,
    workload: Spanned<RawWorkload>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    kind: Spanned<String>,
    // stream
    threads: Option<Spanned<i64>>,
    msg_size: Option<Spanned<i64>>,
    segment_bytes: Option<Spanned<i64>>,
    header_bytes: Option<Spanned<i64>>,
    send_msg_ns: Option<Spanned<f64>>,
    send_byte_ps: Option<Spanned<f64>>,
    xmit_segment_ns: Option<Spanned<f64>>,
    coalesce: Option<Spanned<String>>,
    // rr
    rate_qps: Option<Spanned<Vec<(f64, f64)>>>,
    service_dist: Option<Spanned<String>>,
    service_mean_us: Option<Spanned<f64>>,
    service_sigma: Option<Spanned<f64>>,
    server_threads: Option<Spanned<i64>>,
    request_bytes: Option<Spanned<i64>>,
    response_bytes: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeline {
    at_s: Spanned<f64>,
    policy: Option<Spanned<toml::Value>>,
    probe_fixed_interval_us: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    duration_s: Option<Spanned<f64>>,
    warmup_s: Option<Spanned<f64>>,
}

/// Error context: file name and its text, to turn byte spans into lines.
struct Ctx<'a> {
    file: &'a str,
    src: &'a str,
}

impl Ctx<'_> {
    fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.src.len());
        1 + self.src.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }

    fn err(
        &self,
        span: &Range<usize>,
        key: impl Into<String>,
        msg: impl Into<String>,
    ) -> ScenarioError {
        ScenarioError::Invalid {
            file: self.file.to_string(),
            line: self.line(span),
            key: key.into(),
            message: msg.into(),
        }
    }

    fn f64_min(
        &self,
        v: &Spanned<f64>,
        key: &str,
        min: f64,
        strict: bool,
    ) -> Result<f64, ScenarioError> {
        let x = *v.get_ref();
        let ok = x.is_finite() && if strict { x > min } else { x >= min };
        if ok {
            Ok(x)
        } else {
            let rel = if strict { ">" } else { ">=" };
            Err(self.err(
                &v.span(),
                key,
                format!("must be a finite number {rel} {min} (got {x})"),
            ))
        }
    }

    fn int_in(
        &self,
        v: &Spanned<i64>,
        key: &str,
        min: i64,
        max: i64,
    ) -> Result<u64, ScenarioError> {
        let x = *v.get_ref();
        if (min..=max).contains(&x) {
            Ok(x as u64)
        } else {
            Err(self.err(
                &v.span(),
                key,
                format!("must be an integer in {min}..={max} (got {x})"),
            ))
        }
    }

    fn opt_int(
        &self,
        v: &Option<Spanned<i64>>,
        key: &str,
        min: i64,
        max: i64,
        default: u64,
    ) -> Result<u64, ScenarioError> {
        v.as_ref()
            .map_or(Ok(default), |v| self.int_in(v, key, min, max))
    }

    /// An optional string key that names one of `choices` (the first is
    /// the default); anything else is refused with the names.
    fn opt_choice<T: Copy>(
        &self,
        v: &Option<Spanned<String>>,
        key: &str,
        what: &str,
        choices: &[(&str, T)],
    ) -> Result<T, ScenarioError> {
        let Some(v) = v else {
            return Ok(choices[0].1);
        };
        choices
            .iter()
            .find(|(name, _)| *name == v.get_ref())
            .map(|&(_, c)| c)
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                self.err(
                    &v.span(),
                    key,
                    format!(
                        "unknown {what} `{}` (expected {})",
                        v.get_ref(),
                        names.join(", ")
                    ),
                )
            })
    }

    fn opt_f64(
        &self,
        v: &Option<Spanned<f64>>,
        key: &str,
        min: f64,
        strict: bool,
        default: f64,
    ) -> Result<f64, ScenarioError> {
        v.as_ref()
            .map_or(Ok(default), |v| self.f64_min(v, key, min, strict))
    }
}

fn secs(s: f64) -> Duration {
    Duration((s * 1e9).round() as u64)
}

impl Scenario {
    /// Read and validate a scenario file.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            file: path.display().to_string(),
            source,
        })?;
        Scenario::from_toml_str(&text, &path.display().to_string())
    }

    /// Parse and validate scenario text. `file_name` is used in error messages
    /// and to resolve `include` (relative to its directory).
    pub fn from_toml_str(text: &str, file_name: &str) -> Result<Scenario, ScenarioError> {
        let cx = Ctx {
            file: file_name,
            src: text,
        };
        let raw: RawScenario = toml::from_str(text).map_err(|e| toml_error(&cx, &e))?;

        let calibration = match (&raw.include, &raw.calibration) {
            (Some(inc), Some(_)) => {
                return Err(cx.err(
                    &inc.span(),
                    "include",
                    "give either `include` or a [calibration] table, not both",
                ))
            }
            (Some(inc), None) => load_include(&cx, inc)?,
            (None, Some(c)) => {
                let c2 = c.get_ref().clone();
                c2.validate()
                    .map_err(|e| cx.err(&c.span(), "calibration", e.to_string()))?;
                c2
            }
            (None, None) => Calibration::default(),
        };

        let duration_s = cx.f64_min(&raw.duration_s, "duration_s", 0.0, true)?;
        let sample_ms = cx.opt_f64(&raw.sample_ms, "sample_ms", 0.0, true, 1000.0)?;
        if sample_ms < 1.0 {
            let span = raw.sample_ms.as_ref().map(|s| s.span()).unwrap_or(0..0);
            return Err(cx.err(&span, "sample_ms", "must be at least 1 ms"));
        }
        let max_events = cx.opt_int(
            &raw.max_events_per_sim_s,
            "max_events_per_sim_s",
            1,
            i64::MAX,
            20_000_000,
        )?;

        let host = parse_host(&cx, &raw.host)?;
        let mut vms = Vec::new();
        let mut total_vcpus = 0u64;
        for (i, rv) in raw.vms.iter().enumerate() {
            let spec = parse_vm(&cx, i, rv, &host)?;
            let count = cx.opt_int(&rv.count, &format!("vms[{i}].count"), 1, 1024, 1)?;
            total_vcpus += count * u64::from(spec.vcpus);
            let cap = u64::from(host.cores) * u64::from(host.max_vcpus_per_core);
            if total_vcpus > cap {
                return Err(cx.err(
                    &rv.vcpus.span(),
                    format!("vms[{i}].vcpus"),
                    format!(
                        "{total_vcpus} vCPUs in total cannot be placed on {} cores at most {} per core (host.max_vcpus_per_core)",
                        host.cores, host.max_vcpus_per_core
                    ),
                ));
            }
            for k in 0..count {
                let mut s = spec.clone();
                if count > 1 {
                    s.name = format!("{}{k}", spec.name);
                }
                vms.push(s);
            }
        }
        if vms.is_empty() {
            return Err(cx.err(
                &(0..0),
                "vms",
                "a scenario needs at least one [[vms]] table",
            ));
        }

        let mut timeline = Vec::new();
        for (i, t) in raw.timeline.get_ref().iter().enumerate() {
            timeline.push(parse_timeline(&cx, i, t)?);
        }
        match timeline.first() {
            None => {
                return Err(cx.err(&raw.timeline.span(), "timeline", "needs at least one entry"))
            }
            Some(first) if first.at != Duration::ZERO => {
                return Err(cx.err(
                    &raw.timeline.get_ref()[0].at_s.span(),
                    "timeline[0].at_s",
                    "the first entry must be at 0",
                ))
            }
            _ => {}
        }
        for i in 1..timeline.len() {
            if timeline[i].at <= timeline[i - 1].at {
                return Err(cx.err(
                    &raw.timeline.get_ref()[i].at_s.span(),
                    format!("timeline[{i}].at_s"),
                    "entries must be in strictly increasing time order",
                ));
            }
        }

        let mut periods = Vec::new();
        for (i, p) in raw.periods.iter().enumerate() {
            let v = p.get_ref();
            if !(v.from_s >= 0.0 && v.to_s > v.from_s && v.to_s.is_finite()) {
                return Err(cx.err(
                    &p.span(),
                    format!("periods[{i}]"),
                    "needs 0 <= from_s < to_s",
                ));
            }
            periods.push(v.clone());
        }

        let sweep = match &raw.sweep {
            None => SweepSpec {
                duration: secs(duration_s.min(5.0)),
                warmup: secs(duration_s.min(5.0) / 5.0),
            },
            Some(s) => {
                let d = cx.opt_f64(
                    &s.duration_s,
                    "sweep.duration_s",
                    0.0,
                    true,
                    duration_s.min(5.0),
                )?;
                let w = cx.opt_f64(&s.warmup_s, "sweep.warmup_s", 0.0, false, d / 5.0)?;
                if w >= d {
                    let span = s.warmup_s.as_ref().map(|s| s.span()).unwrap_or(0..0);
                    return Err(cx.err(
                        &span,
                        "sweep.warmup_s",
                        "must be shorter than sweep.duration_s",
                    ));
                }
                SweepSpec {
                    duration: secs(d),
                    warmup: secs(w),
                }
            }
        };

        let name = raw.name.clone().unwrap_or_else(|| {
            Path::new(file_name)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "scenario".into())
        });
        Ok(Scenario {
            name,
            description: raw.description.clone(),
            file: file_name.to_string(),
            duration: secs(duration_s),
            seed: raw.seed,
            sample: Duration((sample_ms * 1e6).round() as u64),
            max_events_per_sim_s: max_events,
            host,
            calibration,
            vms,
            timeline,
            periods,
            sweep,
        })
    }
}

fn toml_error(cx: &Ctx<'_>, e: &toml::de::Error) -> ScenarioError {
    let span = e.span().unwrap_or(0..0);
    // The key is the text at the span when it is a key, else the line's key.
    let line_no = cx.line(&span);
    let line_text = cx.src.lines().nth(line_no.saturating_sub(1)).unwrap_or("");
    let key = line_text
        .split('=')
        .next()
        .map(str::trim)
        .filter(|k| !k.is_empty() && !k.starts_with('['))
        .unwrap_or_else(|| line_text.trim());
    ScenarioError::Invalid {
        file: cx.file.to_string(),
        line: if e.span().is_some() { line_no } else { 0 },
        key: key.to_string(),
        message: e.message().to_string(),
    }
}

fn load_include(cx: &Ctx<'_>, inc: &Spanned<String>) -> Result<Calibration, ScenarioError> {
    let base = Path::new(cx.file).parent().unwrap_or(Path::new("."));
    let path = base.join(inc.get_ref());
    let text = std::fs::read_to_string(&path).map_err(|e| {
        cx.err(
            &inc.span(),
            "include",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let file = path.display().to_string();
    let icx = Ctx {
        file: &file,
        src: &text,
    };
    let c: Calibration = toml::from_str(&text).map_err(|e| toml_error(&icx, &e))?;
    c.validate()
        .map_err(|e| icx.err(&(0..0), "calibration", e.to_string()))?;
    Ok(c)
}

fn parse_host(cx: &Ctx<'_>, h: &RawHost) -> Result<Host, ScenarioError> {
    let cores = cx.int_in(&h.cores, "host.cores", 1, 4096)? as u32;
    let gbps = cx.opt_f64(&h.line_rate_gbps, "host.line_rate_gbps", 0.0, true, 10.0)?;
    let nicq = cx.opt_int(
        &h.nic_queue_packets,
        "host.nic_queue_packets",
        1,
        1 << 20,
        1024,
    )? as u32;
    let slice = cx.opt_f64(&h.sched_slice_us, "host.sched_slice_us", 1.0, false, 3000.0)?;
    let maxv = cx.opt_int(&h.max_vcpus_per_core, "host.max_vcpus_per_core", 1, 64, 8)? as u32;
    let power = match &h.power {
        None => None,
        Some(p) => {
            let v = p.get_ref();
            let n = v.freqs_mhz.len();
            let ok = n >= 1
                && v.idle_w.len() == n
                && v.active_w.len() == n
                && v.freqs_mhz.windows(2).all(|w| w[0] < w[1])
                && v.freqs_mhz
                    .iter()
                    .chain(&v.idle_w)
                    .chain(&v.active_w)
                    .all(|x| x.is_finite() && *x >= 0.0)
                && v.freqs_mhz[0] > 0.0
                && (v.shallow_idle_w.is_empty() || v.shallow_idle_w.len() == n)
                && v.shallow_idle_w.iter().all(|x| x.is_finite() && *x >= 0.0)
                && v.platform_w.is_finite()
                && v.platform_w >= 0.0
                && v.deep_residency_us.is_finite()
                && v.deep_residency_us >= 0.0
                && v.deep_exit_us.is_finite()
                && v.deep_exit_us >= 0.0;
            if !ok {
                return Err(cx.err(
                    &p.span(),
                    "host.power",
                    "needs freqs_mhz (ascending, > 0), idle_w and active_w (and shallow_idle_w if given) of the same length, all >= 0",
                ));
            }
            Some(v.clone())
        }
    };
    let core_mgmt = match &h.core_alloc {
        None => CoreMgmtSpec::default(),
        Some(c) => parse_core_alloc(cx, c, cores)?,
    };
    let vcpu_sched = cx.opt_choice(
        &h.vcpu_sched,
        "host.vcpu_sched",
        "scheduler",
        &[("shares", VcpuSched::Shares), ("slices", VcpuSched::Slices)],
    )?;
    let napi = match &h.napi {
        None => None,
        Some(n) if n.get_ref().is_valid() => Some(n.get_ref().clone()),
        Some(n) => {
            return Err(cx.err(
                &n.span(),
                "host.napi",
                "weight, budget, max_restart, rx_ring and socket_queue must be >= 1, budget_us and max_softirq_us > 0, irq_ns >= 0",
            ))
        }
    };
    Ok(Host {
        cores,
        line_rate_bps: gbps * 1e9,
        nic_queue_packets: nicq,
        sched_slice: Duration((slice * 1e3) as u64),
        max_vcpus_per_core: maxv,
        power,
        core_mgmt,
        vcpu_sched,
        napi,
    })
}

fn parse_core_alloc(
    cx: &Ctx<'_>,
    c: &Spanned<RawCoreAlloc>,
    cores: u32,
) -> Result<CoreMgmtSpec, ScenarioError> {
    let r = c.get_ref();
    let d = CoreMgmtSpec::default();
    let period_ms = cx.opt_f64(&r.period_ms, "host.core_alloc.period_ms", 1.0, false, 100.0)?;
    let slo_us = cx.opt_f64(&r.slo_us, "host.core_alloc.slo_us", 0.0, true, d.slo_us)?;
    let migration_us = cx.opt_f64(
        &r.migration_us,
        "host.core_alloc.migration_us",
        0.0,
        false,
        d.migration_ns / 1e3,
    )?;
    let kind = r.kind.get_ref().as_str();
    let alloc = match kind {
        "time-sharing" => match &r.cores {
            None => CoreAllocSpec::TimeSharing,
            Some(k) => match cx.int_in(k, "host.core_alloc.cores", 1, i64::from(cores))? as u32 {
                k if k == cores => CoreAllocSpec::TimeSharing,
                k => CoreAllocSpec::TimeSharingOn { cores: k },
            },
        },
        "corenap-like" => CoreAllocSpec::CoreNapLike,
        "demeter-like" => CoreAllocSpec::DemeterLike,
        "isolated" => {
            let need = |v: &Option<Spanned<i64>>, key: &str| {
                v.as_ref().map_or_else(
                    || Err(cx.err(&c.span(), key, "required for kind = \"isolated\"")),
                    |v| cx.int_in(v, key, 1, i64::from(cores)),
                )
            };
            let vcpu_cores = need(&r.vcpu_cores, "host.core_alloc.vcpu_cores")? as u32;
            let nq_cores = need(&r.nq_cores, "host.core_alloc.nq_cores")? as u32;
            if vcpu_cores + nq_cores > cores {
                return Err(cx.err(
                    &c.span(),
                    "host.core_alloc",
                    format!("vcpu_cores + nq_cores exceed the host's {cores} cores"),
                ));
            }
            CoreAllocSpec::Isolated {
                vcpu_cores,
                nq_cores,
            }
        }
        "vspace" => {
            let Some(m) = &r.mode else {
                return Err(cx.err(
                    &c.span(),
                    "host.core_alloc.mode",
                    "required for kind = \"vspace\" (p, e or r)",
                ));
            };
            let mode: VspaceMode = m
                .get_ref()
                .parse()
                .map_err(|e: VspaceConfigError| cx.err(&m.span(), "host.core_alloc.mode", e.to_string()))?;
            let cfg = VspaceConfig {
                period_ms: period_ms.round() as u64,
                ..VspaceConfig::new(mode, cores as usize)
            };
            if let Err(e) = cfg.validate() {
                return Err(cx.err(&c.span(), "host.core_alloc", e.to_string()));
            }
            CoreAllocSpec::Vspace { mode }
        }
        other => {
            return Err(cx.err(
                &r.kind.span(),
                "host.core_alloc.kind",
                format!(
                    "unknown allocator `{other}` (expected time-sharing, isolated, corenap-like, demeter-like or vspace)"
                ),
            ))
        }
    };
    Ok(CoreMgmtSpec {
        alloc,
        period: Duration((period_ms * 1e6).round() as u64),
        slo_us,
        migration_ns: migration_us * 1e3,
        be_vm: r.be_vm.unwrap_or(false),
        samples_per_round: d.samples_per_round,
    })
}

fn parse_vm(cx: &Ctx<'_>, i: usize, rv: &RawVm, host: &Host) -> Result<VmSpec, ScenarioError> {
    let k = |s: &str| format!("vms[{i}].{s}");
    let vcpus = cx.int_in(&rv.vcpus, &k("vcpus"), 1, 4096)? as u32;
    if vcpus > host.cores * host.max_vcpus_per_core {
        return Err(cx.err(
            &rv.vcpus.span(),
            k("vcpus"),
            format!("{vcpus} vCPUs cannot be placed on {} cores", host.cores),
        ));
    }
    let ring_size = cx.opt_int(&rv.ring_size, &k("ring_size"), 2, 32768, 256)? as u32;
    if !ring_size.is_power_of_two() {
        let span = rv.ring_size.as_ref().map(|s| s.span()).unwrap_or(0..0);
        return Err(cx.err(
            &span,
            k("ring_size"),
            format!("must be a power of two (got {ring_size})"),
        ));
    }
    let queues = cx.opt_int(&rv.queues, &k("queues"), 1, 256, 1)? as u32;
    let w = rv.workload.get_ref();
    let wk = |s: &str| format!("vms[{i}].workload.{s}");
    let stream_keys: [(&str, bool); 8] = [
        ("threads", w.threads.is_some()),
        ("msg_size", w.msg_size.is_some()),
        ("segment_bytes", w.segment_bytes.is_some()),
        ("header_bytes", w.header_bytes.is_some()),
        ("send_msg_ns", w.send_msg_ns.is_some()),
        ("send_byte_ps", w.send_byte_ps.is_some()),
        ("xmit_segment_ns", w.xmit_segment_ns.is_some()),
        ("coalesce", w.coalesce.is_some()),
    ];
    let rr_keys: [(&str, bool); 7] = [
        ("rate_qps", w.rate_qps.is_some()),
        ("service_dist", w.service_dist.is_some()),
        ("service_mean_us", w.service_mean_us.is_some()),
        ("service_sigma", w.service_sigma.is_some()),
        ("server_threads", w.server_threads.is_some()),
        ("request_bytes", w.request_bytes.is_some()),
        ("response_bytes", w.response_bytes.is_some()),
    ];
    let reject = |keys: &[(&str, bool)], kind: &str| -> Result<(), ScenarioError> {
        match keys.iter().find(|(_, set)| *set) {
            Some((name, _)) => Err(cx.err(
                &rv.workload.span(),
                wk(name),
                format!("not a key of a `{kind}` workload"),
            )),
            None => Ok(()),
        }
    };
    let workload = match w.kind.get_ref().as_str() {
        "stream" => {
            reject(&rr_keys, "stream")?;
            let threads = cx.opt_int(&w.threads, &wk("threads"), 1, 4096, 1)? as u32;
            let msg_size = cx.opt_int(&w.msg_size, &wk("msg_size"), 1, 1 << 20, 64)? as u32;
            let segment_bytes =
                cx.opt_int(&w.segment_bytes, &wk("segment_bytes"), 1, 65536, 1448)? as u32;
            let coalesce = cx.opt_choice(
                &w.coalesce,
                &wk("coalesce"),
                "rule",
                &[
                    ("full", Coalesce::Full),
                    ("since-room", Coalesce::SinceRoom),
                ],
            )?;
            Workload::Stream(StreamLoad {
                threads,
                msg_size,
                segment_bytes,
                header_bytes: cx.opt_int(&w.header_bytes, &wk("header_bytes"), 0, 256, 54)? as u32,
                send_msg_ns: cx.opt_f64(&w.send_msg_ns, &wk("send_msg_ns"), 0.0, false, 520.0)?,
                send_byte_ps: cx.opt_f64(
                    &w.send_byte_ps,
                    &wk("send_byte_ps"),
                    0.0,
                    false,
                    100.0,
                )?,
                xmit_segment_ns: cx.opt_f64(
                    &w.xmit_segment_ns,
                    &wk("xmit_segment_ns"),
                    0.0,
                    false,
                    2000.0,
                )?,
                coalesce,
            })
        }
        "rr" => {
            reject(&stream_keys, "rr")?;
            let rate = w.rate_qps.as_ref().ok_or_else(|| {
                cx.err(
                    &rv.workload.span(),
                    wk("rate_qps"),
                    "missing (list of [time_s, qps])",
                )
            })?;
            let pts = rate.get_ref().clone();
            let ok = !pts.is_empty()
                && pts
                    .iter()
                    .all(|(t, q)| t.is_finite() && q.is_finite() && *t >= 0.0 && *q >= 0.0)
                && pts.windows(2).all(|p| p[0].0 < p[1].0);
            if !ok {
                return Err(cx.err(
                    &rate.span(),
                    wk("rate_qps"),
                    "needs [time_s, qps] points with time ascending and no negative rate",
                ));
            }
            let service = match w.service_dist.as_ref().map(|s| s.get_ref().as_str()) {
                None | Some("exp") => ServiceDist::Exp,
                Some("const") => ServiceDist::Const,
                Some("lognormal") => ServiceDist::LogNormal {
                    sigma: cx.opt_f64(&w.service_sigma, &wk("service_sigma"), 0.0, false, 0.5)?,
                },
                Some(other) => {
                    return Err(cx.err(
                        &w.service_dist.as_ref().map(|s| s.span()).unwrap_or(0..0),
                        wk("service_dist"),
                        format!("unknown distribution `{other}` (expected exp, const, lognormal)"),
                    ))
                }
            };
            let server_threads = cx.opt_int(
                &w.server_threads,
                &wk("server_threads"),
                1,
                4096,
                u64::from(vcpus),
            )? as u32;
            if server_threads > vcpus {
                return Err(cx.err(
                    &w.server_threads.as_ref().map(|s| s.span()).unwrap_or(0..0),
                    wk("server_threads"),
                    format!("more server threads ({server_threads}) than vCPUs ({vcpus})"),
                ));
            }
            Workload::Rr(RrLoad {
                rate_qps: pts,
                service,
                service_mean_ns: cx.opt_f64(
                    &w.service_mean_us,
                    &wk("service_mean_us"),
                    0.0,
                    true,
                    10.0,
                )? * 1e3,
                server_threads,
                request_bytes: cx.opt_int(&w.request_bytes, &wk("request_bytes"), 60, 65536, 100)?
                    as u32,
                response_bytes: cx.opt_int(
                    &w.response_bytes,
                    &wk("response_bytes"),
                    60,
                    65536,
                    1100,
                )? as u32,
            })
        }
        other => {
            return Err(cx.err(
                &w.kind.span(),
                wk("kind"),
                format!("unknown workload kind `{other}` (expected stream, rr)"),
            ))
        }
    };
    Ok(VmSpec {
        name: rv.name.clone().unwrap_or_else(|| "vm".into()),
        vcpus,
        ring_size,
        queues,
        workload,
    })
}

fn parse_timeline(cx: &Ctx<'_>, i: usize, t: &RawTimeline) -> Result<TimelineEntry, ScenarioError> {
    let at_s = cx.f64_min(&t.at_s, &format!("timeline[{i}].at_s"), 0.0, false)?;
    let key = format!("timeline[{i}].policy");
    let policy =
        match (&t.policy, &t.probe_fixed_interval_us) {
            (Some(p), None) => SimPolicy::Policy(parse_policy(cx, &key, p)?),
            (None, Some(iv)) => SimPolicy::FixedInterval {
                interval_us: cx.int_in(
                    iv,
                    &format!("timeline[{i}].probe_fixed_interval_us"),
                    1,
                    100_000,
                )?,
            },
            _ => return Err(cx.err(
                &t.at_s.span(),
                key,
                "each timeline entry needs exactly one of `policy` or `probe_fixed_interval_us`",
            )),
        };
    Ok(TimelineEntry {
        at: secs(at_s),
        policy,
    })
}

/// A policy given as a name (`"netap"`) or a table (`{ kind = "netap", round_ms = 500 }`).
fn parse_policy(
    cx: &Ctx<'_>,
    key: &str,
    p: &Spanned<toml::Value>,
) -> Result<PolicyConfig, ScenarioError> {
    let cfg = match p.get_ref() {
        toml::Value::String(s) => s
            .parse::<PolicyKind>()
            .map(PolicyConfig::default_for)
            .map_err(|e| cx.err(&p.span(), key, e.to_string()))?,
        v @ toml::Value::Table(_) => v
            .clone()
            .try_into::<PolicyConfig>()
            .map_err(|e| cx.err(&p.span(), key, e.message().to_string()))?,
        _ => {
            return Err(cx.err(
                &p.span(),
                key,
                "must be a policy name or a table with `kind`",
            ))
        }
    };
    cfg.validate()
        .map_err(|e| cx.err(&p.span(), key, e.to_string()))?;
    Ok(cfg)
}
