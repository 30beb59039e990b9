"""The report page: one HTML file with plotly.js inlined once, so it works offline and can be mailed around."""

from __future__ import annotations

import functools
import json

from ..version import __version__

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>iosched report</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 0 1.5em 3em; color: #222; line-height: 1.4; }
h1 { margin-top: 0.8em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.88em; display: block; max-width: 100%;
        overflow-x: auto; }  /* a wide table scrolls inside the page, which keeps the window's width */
th, td { border: 1px solid #ccc; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.no td { background: #fff0f0; } .yes { color: #17702f; font-weight: 600; } .nope { color: #b3261e; font-weight: 700; }
details.clauses tr td { background: #fff; } details.clauses tr.no td { background: #fff0f0; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
.meta { color: #555; font-size: 0.92em; } .error { color: #b3261e; font-weight: 600; }
.figure { margin: 1em 0 2em; } .figure .caption { color: #444; font-size: 0.9em; }
.downloads a { margin-right: 0.8em; font-size: 0.85em; }
details { margin: 0.5em 0; } summary { cursor: pointer; font-weight: 600; }
</style>
<script type="text/javascript">{{ plotlyjs }}</script>
</head>
<body>
<h1>iosched: {{ heading }}</h1>
<p class="meta">iosched {{ version }}, code version {{ code_versions }}. Figures are interactive (zoom, hover, click a
legend entry to hide it){% if static %}; each also exists as PNG, SVG and PDF in <code>figures/</code> next to this
page{% else %}; <code>iosched report DIR</code> also writes them as PNG, SVG and PDF{% endif %}.
Rebuild with <code>iosched report DIR</code>.</p>

<table>
<tr><th>experiment</th><th>seed</th><th>reproduces</th><th>runs</th><th>mode</th><th>holds</th></tr>
{% for s in sections %}
<tr{% if s.counted and s.holds < s.counted|length %} class="no"{% endif %}>
<td><a href="#{{ s.name }}">{{ s.name }}</a></td>
<td>{{ s.seed }}</td><td>{{ s.refs|join(", ") }}</td><td class="num">{{ s.runs|length }}</td><td>{{ s.mode }}</td>
<td>{% if s.counted %}{{ s.holds }} of {{ s.counted|length }}{% elif s.error %}<span class="error">incomplete</span>
{% endif %}</td></tr>
{% endfor %}
</table>

{% for fd in fidelity %}
<section id="fidelity-seed{{ fd.seed }}">
<h2>Seed {{ fd.seed }}: every plotted point against the paper's own data</h2>
<p class="meta">Each plotted point of the paper's figures and tables (its artifact's data) beside the simulated one; a
point holds when sim/paper is within [0.8, 1.25]. Calibration inputs, points true by construction and points of
paths not simulated are listed in each experiment's section and not counted.</p>
<table>
<tr><th>figure</th><th>points within ±25%</th><th>misses, and why</th></tr>
{% for g, sh in fd.shares.items() %}
<tr{% if sh.held < sh.total %} class="no"{% endif %}><td>{% if g == "all" %}<b>all</b>{% else %}{{ fd_label(g) }}{% endif %}</td>
<td class="num">{{ sh.text() }}</td><td>{% if sh.held < sh.total %}{{ fd.why.get(g, "") }}{% endif %}</td></tr>
{% endfor %}
</table>
<div class="figure">
<h3>{{ fd.figure.title }}</h3>
{{ divs[fd.figure.id] }}
<p class="caption">{{ fd.figure.caption|code }}</p>
{% if static %}<p class="downloads">{% for ext in ("png", "svg", "pdf") %}<a href="figures/{{ fd.figure.id }}.{{ ext }}">{{ ext|upper }}</a>{% endfor %}</p>{% endif %}
</div>
</section>
{% endfor %}

{% for s in sections %}
<section id="{{ s.name }}">
<h2>{{ s.name }}: {{ s.title }}</h2>
<p class="meta">{% if s.seed %}Seed {{ s.seed }}, {{ s.refs|join(", ") }}. {% endif %}{{ s.description|code }}</p>
{% if s.error %}<p class="error">{{ s.error }}</p>{% endif %}
{% if s.notes %}<ul class="meta">{% for n in s.notes %}<li>{{ n|code }}</li>{% endfor %}</ul>{% endif %}

{% if s.checks %}
<h3>Paper vs iosched</h3>
<table>
<tr><th>ref</th><th>finding</th><th>what</th><th>paper</th><th>iosched</th><th>ratio</th><th>holds?</th></tr>
{% for c in s.checks %}
<tr{% if not c.holds %} class="no"{% endif %}><td>{{ c.ref }}</td><td>{{ c.finding }}</td>
{% if c.clauses|length > 1 %}<td colspan="3">{{ c.statement }}
<details class="clauses"><summary>{{ c.clauses|length }} clauses, {{ c.clauses|selectattr("holds")|list|length }} hold
</summary>
<table>
<tr><th>what</th><th>paper</th><th>iosched</th><th>ratio</th><th>holds?</th></tr>
{% for k in c.clauses %}
<tr{% if not k.holds %} class="no"{% endif %}><td>{{ k.what }}</td><td>{{ k.paper }}</td><td>{{ k.simulated }}</td>
<td class="num">{% if k.ratio is not none %}{{ "%.2f"|format(k.ratio) }}{% endif %}</td>
<td>{% if k.holds %}<span class="yes">yes</span>{% else %}<span class="nope">NO</span>{% endif %}</td></tr>
{% endfor %}
</table>
</details></td>
{% else %}<td>{{ c.what }}</td><td>{{ c.paper }}</td><td>{{ c.simulated }}</td>{% endif %}
<td class="num">{% if c.ratio is not none %}{{ "%.2f"|format(c.ratio) }}{% endif %}</td>
<td>{% if c.holds %}<span class="yes">yes</span>{% else %}<span class="nope">NO</span>{% endif %}</td></tr>
{% endfor %}
</table>
{% endif %}

{% if s.points %}
<details><summary>Every plotted point ({{ s.points|length }}): paper, iosched, ratio</summary>
<table>
<tr><th>figure</th><th>series</th><th>at</th><th>quantity</th><th>paper</th><th>iosched</th><th>ratio</th><th>holds?</th></tr>
{% for p in s.points %}
<tr{% if p.counted and not p.holds %} class="no"{% endif %}><td>{{ p.point.figure }}</td><td>{{ p.point.series }}</td>
<td>{{ p.point.at }}</td><td>{{ p.point.y_name }}</td><td class="num">{{ "%.4g"|format(p.paper) }} {{ p.point.y_unit }}</td>
<td class="num">{% if p.sim is not none %}{{ "%.4g"|format(p.sim) }}{% endif %}</td>
<td class="num">{% if p.ratio is not none %}{{ "%.2f"|format(p.ratio) }}{% endif %}{% if p.x_ratio is not none %} (x {{ "%.2f"|format(p.x_ratio) }}){% endif %}</td>
<td>{% if not p.counted %}{{ p.role }}{% elif p.missing %}<span class="nope">missing</span>{% elif p.holds %}<span class="yes">yes</span>{% else %}<span class="nope">NO</span>{% endif %}</td></tr>
{% endfor %}
</table>
</details>
{% endif %}

{% for t in s.tables %}
<h3>{% if t.ref %}{{ t.ref }}: {% endif %}{{ t.title }}</h3>
<table id="table-{{ t.id }}">
<tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% if t.caption %}<p class="meta">{{ t.caption|code }}</p>{% endif %}
{% endfor %}

{% for f in s.figures %}
<div class="figure">
<h3>{% if f.ref %}{{ f.ref }}: {% endif %}{{ f.title }}</h3>
{{ divs[f.id] }}
{% if f.caption %}<p class="caption">{{ f.caption|code }}</p>{% endif %}
{% if static %}<p class="downloads">{% for ext in ("png", "svg", "pdf") %}<a href="figures/{{ f.id }}.{{ ext }}">{{ ext|upper }}</a>{% endfor %}</p>{% endif %}
</div>
{% endfor %}

{% if s.paper %}
<details><summary>The paper's numbers ({{ s.paper|length }})</summary>
<table><tr><th>ref</th><th>what</th><th>value</th></tr>
{% for n in s.paper %}<tr><td>{{ n.ref }}</td><td>{{ n.what }}</td><td class="num">{{ n.value }} {{ n.unit }}</td></tr>
{% endfor %}</table>
</details>
{% endif %}

<details><summary>Runs ({{ s.runs|length }}{% if s.missing %}, {{ s.missing }} missing{% endif %}): specs, seeds and versions</summary>
{% for series, toml in s.specs %}
<p><b>{{ series }}</b> (as <code>iosched run</code> reads it):</p>
<pre>{{ toml }}</pre>
{% endfor %}
<table>
<tr><th>run id</th><th>series</th><th>sweep point</th><th>rep</th><th>seed</th><th>scheduler</th><th>host / devices</th><th>code version</th></tr>
{% for r in s.runs %}
<tr><td><code>{{ r.id }}</code>{% if not r.done %} <span class="error">(missing)</span>{% endif %}</td><td>{{ r.series }}</td>
<td>{{ r.point_text }}</td><td class="num">{{ r.repetition }}</td><td class="num">{{ r.seed }}</td>
<td>{{ r.scheduler }}{% if r.tunables %} {{ r.tunables_text }}{% endif %}</td><td>{{ r.host }} / {{ r.devices_text }}</td>
<td>{{ r.code_version }}</td></tr>
{% endfor %}
</table>
<p class="meta">Each run's exact simulator config: <code>runs/&lt;run id&gt;/spec.json</code>; fio-style output:
<code>runs/&lt;run id&gt;/fio.json</code>.</p>
</details>
</section>
{% endfor %}
</body>
</html>
"""


def _devices_text(devs: list[str]) -> str:
    if not devs:
        return ""
    names = list(dict.fromkeys(devs))
    return ", ".join(f"{devs.count(n)}x {n}" for n in names)


def inline_code(text: object):
    """Escaped text whose `backticked` spans (commands, file names, as the docs write them) become <code>; text with
    an unpaired backtick is shown as it is."""
    from markupsafe import Markup, escape

    parts = str(text).split("`")
    if len(parts) % 2 == 0:
        return escape(str(text))
    return Markup("").join(escape(p) if i % 2 == 0 else Markup("<code>%s</code>") % p for i, p in enumerate(parts))


@functools.lru_cache(maxsize=1)
def _page_template():
    import jinja2

    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["code"] = inline_code
    return env.from_string(TEMPLATE)    # compiling it takes ~0.15 s


def prepare() -> None:
    """Do ahead what drawing a report starts with and takes a moment (compiling the page's template, loading
    plotly's figure template): `iosched run` calls it in a thread while the simulation runs without the GIL."""
    from .figures import plotly_template_json

    _page_template()
    plotly_template_json()


def render_html(report, *, static: bool = True) -> str:
    import plotly.offline

    from .figures import render_plotly

    tpl = _page_template()
    from markupsafe import Markup

    divs = {f.id: Markup(render_plotly(f)) for s in report.sections for f in s.figures}
    divs.update({fd.figure.id: Markup(render_plotly(fd.figure)) for fd in report.fidelity})
    for s in report.sections:
        for r in s.runs:
            r["point_text"] = ", ".join(f"{k}={json.dumps(v)}" for k, v in r["point"].items())
            r["tunables_text"] = ", ".join(f"{k}={v}" for k, v in r["tunables"].items())
            r["devices_text"] = _devices_text(r["devices"])
    versions = sorted({r["code_version"] for s in report.sections for r in s.runs if r["code_version"]})
    paper = any(s.kind == "paper" for s in report.sections)
    from ..papers.scoring import figure_label

    return tpl.render(plotlyjs=Markup(plotly.offline.get_plotlyjs()), sections=report.sections, divs=divs,
                      fidelity=report.fidelity, fd_label=figure_label,
                      static=static, version=__version__,
                      code_versions=", ".join(versions) or "none (measured runs only: no simulator ran)",
                      heading="the seed papers' results, reproduced" if paper else "experiment report")
