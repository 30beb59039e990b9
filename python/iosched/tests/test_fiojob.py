import re
import textwrap

import re

import pytest

from iosched.errors import SpecError
from iosched.fiojob import DeviceInfo, JobContext, RawJob, parse_jobfile, random_distribution_option, resolve_job

CAP = 1000204886016


def ctx(n_dev=1, cores=10, runtime=2 * 10**9, ramp=0, time_based=False):
    return JobContext(devices=[DeviceInfo(f"/dev/nvme{i}n1", CAP, 512) for i in range(n_dev)], cores=cores,
                      default_runtime_ns=runtime, default_ramp_ns=ramp, default_time_based=time_based)


def write(tmp_path, text):
    p = tmp_path / "jobs.fio"
    p.write_text(textwrap.dedent(text))
    return p


def test_global_sections_overrides_flags_comments(tmp_path):
    p = write(tmp_path, """\
        ; a comment
        # another
        [global]
        ioengine=libaio
        direct=1
        bs=4k        ; trailing comment
        time_based
        runtime=3

        [lapp]
        rw=randread
        iodepth=1
        cpus_allowed=0

        [bg]
        readwrite=randwrite
        bs=128k
        iodepth = 32
        numjobs=4
        cpus_allowed=1-4
        cpus_allowed_policy=split
        group_reporting
        thinktime=50
        startdelay=100ms
        ramp_time=1
        """)
    jobs = parse_jobfile(p, "jobs.fio")
    assert [j.name for j in jobs] == ["lapp", "bg"]
    lapp = resolve_job(jobs[0], ctx()).config
    bg_r = resolve_job(jobs[1], ctx())
    bg = bg_r.config
    assert lapp["rw"] == "randread" and lapp["bs_bytes"] == 4096 and lapp["ioengine"] == "libaio"
    assert lapp["time_based"] is True and lapp["runtime_ns"] == 3 * 10**9
    assert lapp["cpus_allowed"] == [0] and lapp["devices"] == [0]
    assert lapp["size_bytes"] == CAP and lapp["offset_bytes"] == 0
    assert bg["rw"] == "randwrite" and bg["bs_bytes"] == 128 * 1024 and bg["iodepth"] == 32
    assert bg["numjobs"] == 4 and bg["cpus_allowed"] == [1, 2, 3, 4] and bg["cpus_split"] is True
    assert bg["thinktime_ns"] == 50_000 and bg["start_ns"] == 100_000_000 and bg["ramp_ns"] == 10**9
    assert bg_r.group_reporting is True
    assert bg_r.options["readwrite"] == "randwrite" and bg_r.options["name"] == "bg"


def test_global_after_job_does_not_apply(tmp_path):
    p = write(tmp_path, "[a]\nrw=read\n[global]\nbs=8k\n[b]\nrw=write\n")
    a, b = parse_jobfile(p, "jobs.fio")
    assert "bs" not in a.options and b.options["bs"] == "8k"


def test_defaults():
    """fio's defaults for a fio job file (its engine is psync, as `fio` prints); a TOML job's engine is io_uring."""
    c = resolve_job(RawJob("j", {}, "f", "[j]", "fio"), ctx()).config
    assert (c["rw"], c["rwmixread"], c["bs_bytes"], c["iodepth"], c["numjobs"], c["ioengine"]) == \
        ("read", 50, 4096, 1, 1, "psync")
    assert resolve_job(RawJob("j", {}, "f", 'job "j"', "toml"), ctx()).config["ioengine"] == "io_uring"
    assert c["cgroup_weight"] == 100 and c["cgroup"] == "" and c["prioclass"] == 0 and c["rate_iops"] == 0
    assert c["time_based"] is False and c["cpus_allowed"] == [] and c["cpus_split"] is False


def test_rw_aliases_and_mix():
    c = resolve_job(RawJob("j", {"rw": "rw", "rwmixwrite": "30"}, "f", "[j]", "fio"), ctx()).config
    assert c["rw"] == "readwrite" and c["rwmixread"] == 70


def test_psync_forces_qd1():
    r = resolve_job(RawJob("j", {"ioengine": "psync", "iodepth": "8"}, "f", "[j]", "fio"), ctx())
    assert r.config["iodepth"] == 1 and "behaves as 1" in r.notes[0]


def test_size_offset_percent():
    c = resolve_job(RawJob("j", {"size": "50%", "offset": "10%"}, "f", "[j]", "fio"), ctx()).config
    assert c["offset_bytes"] == int(CAP * 0.1) // 512 * 512
    assert c["size_bytes"] == int(CAP * 0.5) // 512 * 512
    c = resolve_job(RawJob("j", {"size": "1g", "offset": "4k"}, "f", "[j]", "fio"), ctx()).config
    assert c["size_bytes"] == 1 << 30 and c["offset_bytes"] == 4096


def test_filename_colon_list():
    c = resolve_job(RawJob("j", {"filename": "/dev/nvme0n1:/dev/nvme2n1"}, "f", "[j]", "fio"), ctx(3)).config
    assert c["devices"] == [0, 2]


@pytest.mark.parametrize("opts,msg", [
    ({"wait_for": "x"}, "jobs.fio: [j] wait_for: fio option not supported by iosched"),
    ({"verify": "md5"}, "jobs.fio: [j] verify: fio option not supported by iosched"),
    ({"filename": "/dev/nvme3n1"}, "jobs.fio: [j] filename=/dev/nvme3n1: no such device (have /dev/nvme0n1)"),
    ({"direct": "0"}, "jobs.fio: [j] direct=0: buffered I/O needs a host preset with a page_cache"),
    ({"rw": "randread:8"}, "jobs.fio: [j] rw: \"randread:8\": the :N offset modifier"),
    ({"rw": "trim"}, "jobs.fio: [j] rw: trim: the simulator issues no trims"),
    ({"iodepth": "0"}, "jobs.fio: [j] iodepth: expected an integer in 1..65536, got 0"),
    ({"bs": "4x"}, "jobs.fio: [j] bs: expected a size"),
    ({"bs": "1000"}, "jobs.fio: [j] bs: expected a multiple of the logical block size 512"),
    ({"bs": "4k,8k"}, "separate read/write block sizes"),
    ({"cpus_allowed": "12"}, 'jobs.fio: [j] cpus_allowed "12": host has 10 cores (0-9)'),
    ({"prio": "9"}, "jobs.fio: [j] prio: expected an integer in 0..7, got 9"),
    ({"ioengine": "posixaio"}, "jobs.fio: [j] ioengine: expected one of io_uring, libaio, psync"),
    ({"cgroup_weight": "0"}, "cgroup_weight: expected an integer in 1..1000, got 0"),
    ({"size": "2t"}, "exceeds the device capacity"),
    ({"time_based": "maybe"}, "time_based: expected 0 or 1"),
])
def test_option_errors(opts, msg):
    with pytest.raises(SpecError) as e:
        resolve_job(RawJob("j", opts, "jobs.fio", "[j]", "fio"), ctx())
    assert msg in str(e.value)
    assert "\n" not in str(e.value)


def test_options_without_effect_are_accepted_and_shown():
    """What the written data holds (refill_buffers, zero_buffers, scramble_buffers) does not change a run of a drive
    that neither compresses nor deduplicates: the job reads as without them, and fio.json's job options keep them.
    Compression does change it, so buffer_compress_percentage stays an error (the negative control)."""
    plain = resolve_job(RawJob("j", {"rw": "randwrite"}, "f", "[j]", "fio"), ctx())
    opts = {"rw": "randwrite", "refill_buffers": None, "zero_buffers": "1", "scramble_buffers": "0", "new_group": None}
    with_them = resolve_job(RawJob("j", opts, "f", "[j]", "fio"), ctx())
    assert with_them.config == plain.config and with_them.group_reporting == plain.group_reporting
    assert {"refill_buffers", "zero_buffers", "scramble_buffers", "new_group"} <= set(with_them.options)
    with pytest.raises(SpecError, match="buffer_compress_percentage: fio option not supported by iosched"):
        resolve_job(RawJob("j", {"buffer_compress_percentage": "50"}, "f", "[j]", "fio"), ctx())


def test_io_uring_file_and_buffer_registration_are_accepted_with_io_uring_only():
    """The ICPE'24 artifact ran every job with ioengine=io_uring, registerfiles=1, fixedbufs=1: its job files run
    as without them (the host's io_uring costs were fitted to those runs), fio.json shows them and the kernel
    backend passes them on. With another engine fio knows neither (the negative control), and polled I/O (hipri)
    is not modelled, so it stays an error."""
    plain = resolve_job(RawJob("j", {"rw": "randread", "ioengine": "io_uring"}, "f", "[j]", "fio"), ctx())
    opts = {"rw": "randread", "ioengine": "io_uring", "registerfiles": "1", "fixedbufs": None}
    with_them = resolve_job(RawJob("j", opts, "f", "[j]", "fio"), ctx())
    assert with_them.config == plain.config and with_them.io_uring_options == ("registerfiles", "fixedbufs")
    assert plain.io_uring_options == () and {"registerfiles", "fixedbufs"} <= set(with_them.options)
    off = resolve_job(RawJob("j", {"fixedbufs": "0"}, "f", "[j]", "fio"), ctx())
    assert off.io_uring_options == () and off.config == resolve_job(RawJob("j", {}, "f", "[j]", "fio"), ctx()).config
    with pytest.raises(SpecError, match=r"^f: \[j\] fixedbufs: an option of fio's io_uring engine, not of "
                                        r"ioengine=libaio$"):
        resolve_job(RawJob("j", {"ioengine": "libaio", "fixedbufs": "1"}, "f", "[j]", "fio"), ctx())
    with pytest.raises(SpecError, match="hipri: fio option not supported by iosched"):
        resolve_job(RawJob("j", {"hipri": None}, "f", "[j]", "fio"), ctx())


def test_fios_other_synchronous_engines_are_simulated_as_psync():
    """sync, vsync, pvsync and pvsync2 take the same synchronous path through the kernel as psync: the simulated
    job is psync's, with a note, and fio (kernel and VM backends) runs the engine given. An engine fio does not
    have is still refused (the negative control)."""
    psync = resolve_job(RawJob("j", {"rw": "randread", "ioengine": "psync"}, "f", "[j]", "fio"), ctx())
    for engine in ("sync", "vsync", "pvsync", "pvsync2"):
        rj = resolve_job(RawJob("j", {"rw": "randread", "ioengine": engine, "iodepth": "4"}, "f", "[j]", "fio"),
                         ctx())
        assert rj.config == psync.config and rj.fio_engine == engine and rj.options["ioengine"] == engine
        assert any(f"ioengine={engine} is simulated as psync" in n for n in rj.notes)
        assert any(f"ioengine={engine} is synchronous: iodepth=4 behaves as 1" in n for n in rj.notes)
    assert psync.fio_engine is None
    with pytest.raises(SpecError, match=r"ioengine: expected one of io_uring, libaio, psync, sync, vsync, pvsync, "
                                        r"pvsync2, got \"posixaio\""):
        resolve_job(RawJob("j", {"ioengine": "posixaio"}, "f", "[j]", "fio"), ctx())


def test_bssplit_takes_fios_forms():
    """bssplit: one list for both directions or READS,WRITES; sizes without a percent share the rest (fio's rule);
    the block unit is the sizes' gcd; each refusal is one line (negative controls)."""
    def split(text, **extra):
        rj = resolve_job(RawJob("j", {"rw": "randrw", "bssplit": text, **extra}, "f", "[j]", "fio"), ctx())
        return rj.config["bssplit"], rj.config["bs_bytes"], rj.notes
    shares, bs, _ = split("4k/10:64k/50:32k/40")
    assert shares[0] == shares[1] == [{"bytes": 4096, "percent": 10}, {"bytes": 65536, "percent": 50},
                                      {"bytes": 32768, "percent": 40}] and bs == 4096
    shares, bs, _ = split("8k/:16k/:32k/,64k/100")      # 100 / 3: 34, 33, 33 (the first takes the remainder)
    assert [s["percent"] for s in shares[0]] == [34, 33, 33] and shares[1] == [{"bytes": 65536, "percent": 100}]
    assert bs == 8192
    _, _, notes = split("4k/100", bs="8k")
    assert any("bssplit sets the block sizes, bs is not used" in n for n in notes)
    plain = resolve_job(RawJob("j", {"rw": "randrw"}, "f", "[j]", "fio"), ctx()).config
    assert "bssplit" not in plain
    for text, why in [("4k/60:8k/60", "the percentages of a list add up to 120; fio needs 100"),
                      ("4k/50:8k/40", "add up to 90; fio needs 100"),
                      ("4k/50:8k/x", "expected a whole percent after /"),
                      ("4k/100,4k/100,4k/100", "a trim list is not supported"),
                      ("1000/100", "multiples of the logical block size 512")]:
        with pytest.raises(SpecError, match=re.escape(why)):
            split(text)


def test_fios_log_options_need_log_avg_msec_and_a_plain_prefix():
    """write_bw_log / write_iops_log / write_lat_log name a prefix (bare: the job's name) and need log_avg_msec,
    which also sets the job's statistics window; every refusal is one line naming the option (negative controls)."""
    rj = resolve_job(RawJob("j", {"rw": "randread", "write_bw_log": "pfx", "write_lat_log": None,
                                  "write_iops_log": "", "log_avg_msec": "200", "numjobs": "2"}, "f", "[j]", "fio"),
                     ctx())
    assert rj.logs == {"bw": "pfx", "iops": "j", "lat": "j"} and rj.log_avg_ms == 200
    assert rj.config["stats_window_ns"] == 200_000_000
    assert any("numjobs=2: each log holds the job's 2 processes" in n for n in rj.notes)
    plain = resolve_job(RawJob("j", {"rw": "randread"}, "f", "[j]", "fio"), ctx())
    assert plain.logs == {} and "stats_window_ns" not in plain.config
    off = resolve_job(RawJob("j", {"write_bw_log": False}, "f", "[j]", "toml"), ctx())
    assert off.logs == {}
    for opts, why in [({"write_iops_log": "x"}, "write_iops_log: the simulator logs averages over log_avg_msec "
                                                "windows, not every I/O: add log_avg_msec"),
                      ({"write_bw_log": "../x", "log_avg_msec": "100"}, "write_bw_log: expected a log file name "
                                                                        "prefix of letters"),
                      ({"write_bw_log": "x", "log_avg_msec": "0"}, "log_avg_msec: expected an integer")]:
        with pytest.raises(SpecError, match=re.escape(why)):
            resolve_job(RawJob("j", opts, "f", "[j]", "fio"), ctx())


def test_random_distribution_takes_fios_forms_defaults_and_ranges():
    """zipf/pareto/normal with fio's defaults (zipf 1.1, pareto 0.2, normal 0; center drawn, normal's 0.5) and the
    ranges fio 3.33 checks (each refused case is refused by `fio --parse-only` too, but negative theta, which fio
    takes and iosched refuses as meaningless); random is uniform: no distribution in the config."""
    def dist(text):
        return resolve_job(RawJob("j", {"rw": "randread", "random_distribution": text}, "f", "[j]", "fio"),
                           ctx()).config.get("random_distribution")
    assert dist("random") is None
    assert dist("zipf") == {"kind": "zipf", "theta": 1.1, "center": None}
    assert dist("zipf:1.2:0.25") == {"kind": "zipf", "theta": 1.2, "center": 0.25}
    assert dist("pareto") == {"kind": "pareto", "h": 0.2, "center": None}
    assert dist("normal:10") == {"kind": "normal", "dev_percent": 10.0, "center": 0.5}
    assert random_distribution_option(dist("zipf:1.2:0.25")) == "zipf:1.2:0.25"
    assert random_distribution_option(dist("pareto")) == "pareto:0.2"
    for bad, why in [("zipf:1", "zipf's theta must be >= 0 and not 1"), ("zipf:-1", "zipf's theta"),
                     ("pareto:1.5", "pareto's h must be between 0 and 1"), ("normal:100", "normal's deviation"),
                     ("zipf:1.2:1.5", "the center must be within 0..1"), ("zipf:abc", "with numbers"),
                     ("zipf:nan", "with numbers"), ("foo", "expected random, zipf"), ("random:1", "expected random"),
                     ("zoned:60/10:40/90", "zoned distributions are not supported"),
                     ("zipf:1.2,pareto:0.2", "separate read/write distributions")]:
        with pytest.raises(SpecError, match=r"^f: \[j\] random_distribution: .*" + re.escape(why)):
            dist(bad)
    seq = resolve_job(RawJob("j", {"rw": "read", "random_distribution": "zipf"}, "f", "[j]", "fio"), ctx())
    assert any("no effect on a sequential job" in n for n in seq.notes)


def test_loops_repeat_a_sized_job_and_leave_a_time_based_one_alone():
    """loops=3 on a job bounded by its size: the simulator transfers the size three times (its own test counts the
    I/Os); a time_based job ends at its runtime, so there loops only gets a note, as fio ignores it; 0 is an error,
    and so is a replay (whose repeats time_based gives)."""
    sized = resolve_job(RawJob("j", {"size": "8k", "loops": "3", "time_based": "0"}, "f", "[j]", "fio"), ctx())
    assert sized.config["loops"] == 3 and sized.options["loops"] == "3"
    once = resolve_job(RawJob("j", {"size": "8k", "loops": "1", "time_based": "0"}, "f", "[j]", "fio"), ctx())
    assert "loops" not in once.config
    timed = resolve_job(RawJob("j", {"loops": "3", "time_based": "1"}, "f", "[j]", "fio"), ctx())
    assert "loops" not in timed.config and any("loops has no effect on a time_based job" in n for n in timed.notes)
    with pytest.raises(SpecError, match=r"^f: \[j\] loops: expected an integer in 1\.\.4294967295, got 0"):
        resolve_job(RawJob("j", {"loops": "0"}, "f", "[j]", "fio"), ctx())


def test_separate_processes_is_a_toml_jobs_own_option():
    """iosched's own option reaches the simulator's job, stays out of fio.json's job options (fio's), and a fio job
    file, which real fio must read too, refuses it with one line naming it."""
    job = resolve_job(RawJob("j", {"separate_processes": True}, "f", "[j]", "toml"), ctx())
    assert job.config["separate_processes"] is True and "separate_processes" not in job.options
    off = resolve_job(RawJob("j", {"separate_processes": False}, "f", "[j]", "toml"), ctx())
    assert "separate_processes" not in off.config
    assert "separate_processes" not in resolve_job(RawJob("j", {}, "f", "[j]", "toml"), ctx()).config
    with pytest.raises(SpecError, match=r"^f: \[j\] separate_processes: iosched's own option, not fio's"):
        resolve_job(RawJob("j", {"separate_processes": "1"}, "f", "[j]", "fio"), ctx())


def test_randseed_seeds_the_jobs_offsets():
    """randseed goes to the simulator as the job's own seed (fio takes 64 bits); without it the job has none and
    draws from the run's seed. Out of range or not a number: one line naming the option."""
    assert "randseed" not in resolve_job(RawJob("j", {}, "f", "[j]", "fio"), ctx()).config
    assert resolve_job(RawJob("j", {"randseed": "1234"}, "f", "[j]", "fio"), ctx()).config["randseed"] == 1234
    top = resolve_job(RawJob("j", {"randseed": str(2**64 - 1)}, "f", "[j]", "fio"), ctx())
    assert top.config["randseed"] == 2**64 - 1 and top.options["randseed"] == str(2**64 - 1)
    for bad in (str(2**64), "-1", "x", None):
        with pytest.raises(SpecError, match=r"^f: \[j\] randseed: expected an integer in 0\.\.18446744073709551615"):
            resolve_job(RawJob("j", {"randseed": bad}, "f", "[j]", "fio"), ctx())


def test_percentile_list_sets_fio_json_percentiles_in_ascending_order():
    """fio sorts percentile_list; the job's config (what the simulator runs) does not change."""
    plain = resolve_job(RawJob("j", {}, "f", "[j]", "fio"), ctx())
    r = resolve_job(RawJob("j", {"percentile_list": "99.9:50:99.99"}, "f", "[j]", "fio"), ctx())
    assert r.percentiles == (50.0, 99.9, 99.99) and plain.percentiles is None and r.config == plain.config
    assert r.options["percentile_list"] == "99.9:50:99.99"
    for bad in ("99:abc", "0:50", "101", ":".join(["50"] * 21), "nan", "99:"):
        with pytest.raises(SpecError, match=r"f: \[j\] percentile_list: expected 1-20 percentiles in \(0, 100\]"):
            resolve_job(RawJob("j", {"percentile_list": bad}, "f", "[j]", "fio"), ctx())


def test_runtime_required_without_size():
    with pytest.raises(SpecError, match="runtime: required"):
        resolve_job(RawJob("j", {}, "jobs.fio", "[j]", "fio"), ctx(runtime=None))
    r = resolve_job(RawJob("j", {"size": "1m"}, "jobs.fio", "[j]", "fio"), ctx(runtime=None))
    assert r.config["size_bytes"] == 1 << 20 and r.notes


def test_parser_errors(tmp_path):
    for text, msg in [("[global]\nbs=4k\n", "no job sections"), ("", "no jobs"),
                      ("bs=4k\n[a]\n", "line 1: bs: option outside of a section"),
                      ("[a]\ninclude other.fio\n", "include: not supported"),
                      ("[a\nbs=4k\n", "expected a section header")]:
        p = write(tmp_path, text)
        with pytest.raises(SpecError) as e:
            parse_jobfile(p, "jobs.fio")
        assert msg in str(e.value) and str(e.value).startswith("jobs.fio")


def test_toml_unknown_key():
    with pytest.raises(SpecError) as e:
        resolve_job(RawJob("bg", {"iodepht": 2}, "spec.toml", 'job "bg"', "toml"), ctx())
    assert str(e.value) == 'spec.toml: job "bg": iodepht: unknown key (not a job option iosched supports)'
    with pytest.raises(SpecError) as e:
        resolve_job(RawJob("bg", {"iodepth": 0}, "spec.toml", 'job "bg"', "toml"), ctx())
    assert str(e.value) == 'spec.toml: job "bg": iodepth: expected an integer in 1..65536, got 0'


def test_cgroup_weight_applies_to_a_named_cgroup_only_as_in_fio():
    c = resolve_job(RawJob("j", {"cgroup": "a", "cgroup_weight": "250"}, "f", "[j]", "fio"), ctx()).config
    assert (c["cgroup"], c["cgroup_weight"]) == ("a", 250)
    r = resolve_job(RawJob("j", {"cgroup_weight": "250"}, "f", "[j]", "fio"), ctx())
    assert (r.config["cgroup"], r.config["cgroup_weight"]) == ("", 100)
    assert "cgroup_weight has no effect without cgroup" in r.notes[0]


def buffered_ctx():
    c = ctx()
    c.page_cache = True
    return c


def test_buffered_job_with_its_own_file_per_process():
    opts = {"rw": "write", "direct": "0", "ioengine": "psync", "bs": "64k", "size": "8m", "numjobs": "3",
            "offset_increment": "8m", "invalidate": "0", "stonewall": None}
    c = resolve_job(RawJob("j", opts, "jobs.fio", "[j]", "fio"), buffered_ctx()).config
    assert c["buffered"] and not c["invalidate"] and c["stonewall"]
    assert c["offset_increment_bytes"] == 8 << 20 and c["size_bytes"] == 8 << 20


def test_end_fsync_and_fsync_on_close_fsync_a_writer_and_nothing_else_as_fio_does():
    base = {"direct": "0", "ioengine": "psync", "bs": "64k", "size": "8m"}
    for option in ("end_fsync", "fsync_on_close"):
        r = resolve_job(RawJob("j", {**base, "rw": "write", option: "1"}, "f", "[j]", "fio"), buffered_ctx())
        assert r.config["end_fsync"] and not r.notes
    # Negative controls: off by default and when set to 0; a reader's is dropped with a note; a direct writer's
    # keeps it (the kernel backend runs the flush) and says the simulator has nothing to write back.
    for opts in ({"rw": "write"}, {"rw": "write", "end_fsync": "0"}):
        assert "end_fsync" not in resolve_job(RawJob("j", {**base, **opts}, "f", "[j]", "fio"), buffered_ctx()).config
    r = resolve_job(RawJob("j", {**base, "rw": "read", "end_fsync": "1"}, "f", "[j]", "fio"), buffered_ctx())
    assert "end_fsync" not in r.config and "no effect on a job that only reads" in r.notes[0]
    r = resolve_job(RawJob("j", {"rw": "randwrite", "end_fsync": "1"}, "f", "[j]", "fio"), ctx())
    assert r.config["end_fsync"] and "drive cache flush an fsync sends is not simulated" in r.notes[0]


@pytest.mark.usefixtures("real_presets")
def test_end_fsync_times_the_writeback_in_the_jobs_bandwidth():
    """fio counts end_fsync in the job's runtime (backend.c: do_io fsyncs before update_runtime), so three 16 MiB
    buffered writers on i7-3517u-4c run at memory speed without it and at the SATA drive's rate with it."""
    from iosched import native
    from iosched.simconfig import fio_jobs, preset_params, sim_config

    host, device = preset_params("i7-3517u-4c", "sandisk-u100-240gb-sata")

    def mb_s(end_fsync: bool) -> float:
        opts = {"rw": "write", "bs": 65536, "ioengine": "psync", "direct": 0, "numjobs": 3, "size": 16 << 20,
                "offset": "1g", "offset_increment": 16 << 20, "runtime": "60s", "end_fsync": int(end_fsync)}
        jobs = fio_jobs([("w", opts)], host, [device], runtime_s=None, ramp_s=0, time_based=False, page_cache=True,
                        origin="fio", file="test")
        job = native.simulate(sim_config(seed=1, host=host, devices=[device], jobs=jobs, scheduler="noop"))["jobs"][0]
        return job["write"]["bytes"] / (job["window_ns"] / 1e9) / 1e6

    cached, synced = mb_s(False), mb_s(True)
    assert cached > 5_000 and synced < 600, (cached, synced)   # the SATA link caps the drive at 570 MB/s


@pytest.mark.parametrize("opts,msg", [
    ({"rw": "randread", "direct": "0", "ioengine": "psync", "size": "1m"}, "rw=read and rw=write only"),
    ({"rw": "read", "direct": "0", "size": "1m", "ioengine": "io_uring"}, "ioengine=psync only, got io_uring"),
    ({"rw": "read", "direct": "0", "ioengine": "psync"}, "size: a buffered job needs a size"),
    ({"rw": "read", "direct": "0", "ioengine": "psync", "size": "1m", "bs": "2k"}, "whole 4 KiB pages"),
    ({"rw": "read", "numjobs": "4", "size": "1t", "offset_increment": "1t"}, "exceeds the device capacity"),
])
def test_buffered_option_errors(opts, msg):
    with pytest.raises(SpecError) as e:
        resolve_job(RawJob("j", opts, "jobs.fio", "[j]", "fio"), buffered_ctx())
    assert msg in str(e.value)


def test_rate_in_bytes_per_second_becomes_a_cap_in_ios_per_second():
    def rate_iops(opts):
        return resolve_job(RawJob("j", opts, "jobs.fio", "[j]", "fio"), ctx()).config["rate_iops"]

    assert rate_iops({"rate": "4m", "bs": "4k"}) == 1024
    assert rate_iops({"rate": "100m", "bs": "64k"}) == 1600
    assert rate_iops({"rate": "1k", "bs": "4k"}) == 1, "a rate below one block per second still limits"
    assert rate_iops({"rate": "0"}) == 0


@pytest.mark.parametrize("opts,msg", [
    ({"rate": "4m,1m"}, "separate read/write rates are not supported"),
    ({"rate": "4m", "rate_iops": "100"}, "give rate or rate_iops, not both"),
    ({"rate": "fast"}, "expected a size like 4k"),
])
def test_rate_errors(opts, msg):
    with pytest.raises(SpecError) as e:
        resolve_job(RawJob("j", opts, "jobs.fio", "[j]", "fio"), ctx())
    assert msg in str(e.value)


def test_the_docs_list_every_fio_option_with_what_iosched_does():
    """docs/spec.md's list of fio options is the code's: every honoured, ignored and refused option, each refusal
    with the reason its error gives."""
    from iosched.fiojob import ALIASES, IGNORED, OPTIONS, REFUSED

    from .conftest import REPO

    text = (REPO / "docs" / "spec.md").read_text()
    section = text[text.index("### Every fio option iosched knows"):text.index("## Trace replay")]
    honoured, accepted, refused = section.split("Honoured")[1].split("Accepted")[0], \
        section.split("Accepted")[1].split("Refused")[0], section.split("Refused")[1]
    named = lambda part: set(re.findall(r"`([a-z_0-9]+)`", part))    # noqa: E731
    assert named(honoured) == (set(OPTIONS) - {"name"}) | set(ALIASES)
    assert named(accepted) == IGNORED
    rows = dict(re.findall(r"^\| `([a-z_0-9]+)` \| (.+) \|$", refused, re.M))
    assert rows == REFUSED
    for option, why in REFUSED.items():         # and the error says it
        with pytest.raises(SpecError, match=re.escape(f"{option}: fio option not supported by iosched: {why}")):
            resolve_job(RawJob("j", {option: "1"}, "f", "[j]", "fio"), ctx())
