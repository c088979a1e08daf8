"""The report page: one self-contained HTML file (inline CSS, inline vanilla JS, base64 PNGs).

Nothing on the page loads from the network or a server, so ``report.html`` opens from disk and
can be mailed or archived alone. Element ids the browser test relies on: ``#header``,
``#curves``, ``#group-sizes``, ``#timing``, ``#viewer``, ``#vw-iter``, ``#vw-task``,
``#vw-cols`` (one ``.traj`` column per rollout, one ``.step`` per step; steps in a shared
anchor-state group of size > 1 carry ``.grouped`` and a background colour). A step's label
``.gl`` (``t=``, group) is a line above its observation ``.obs``, in which grid rows (a Sokoban
room) are a ``pre.grid`` block that never wraps (tabs expanded, sideways scroll when too wide)
and prose lines a wrapping ``.txt`` block; 8 rollout columns fit a 1400 px window.
"""

from __future__ import annotations

import html

from gigpo.report.plots import Panel


def esc(s) -> str:
    return html.escape("" if s is None else str(s), quote=True)


def _fmt(v) -> str:
    return "&ndash;" if v is None else f"{v:.3f}"


def header_html(name: str, summary: list[tuple[str, str]], evals: dict, problems: list[str]) -> str:
    """Run name, config summary (label, value) pairs and held-out success figures."""
    cfg = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in summary)
    best = _fmt(evals["best"]) + (f" (iteration {evals['best_iteration']})" if evals["best"] is not None else "")
    probs = "".join(f"<li>{esc(p)}</li>" for p in problems)
    return f"""<header id="header">
<h1>gigpo run: <span id="run-name">{esc(name)}</span></h1>
<div class="cards">
 <div class="card"><div class="lbl">held-out success, final</div><div class="big" id="final-success">{_fmt(evals["final"])}</div></div>
 <div class="card"><div class="lbl">held-out success, best</div><div class="big" id="best-success">{best}</div></div>
 <div class="card"><div class="lbl">held-out success, before training</div><div class="big">{_fmt(evals["before"])}</div></div>
</div>
<table class="cfg">{cfg}</table>
{f'<ul class="notes">{probs}</ul>' if probs else ""}
</header>"""


def panel_html(p: Panel, wide: bool = False) -> str:
    body = (
        f'<img alt="{esc(p.title)}" src="data:image/png;base64,{p.png}">'
        if p.png
        else f'<p class="missing">{esc(p.title)}: {esc(p.note)}</p>'
    )
    note = f'<p class="note">{esc(p.note)}</p>' if p.png and p.note else ""
    return f'<figure class="panel{" wide" if wide else ""}" id="plot-{esc(p.key)}">{body}{note}</figure>'


def section_html(sid: str, title: str, intro: str, panels: list[Panel], wide: bool = False) -> str:
    inner = "".join(panel_html(p, wide) for p in panels)
    return f'<section id="{sid}"><h2>{esc(title)}</h2><p class="intro">{intro}</p><div class="grid">{inner}</div></section>'


CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1400px;padding:12px 20px;color:#222}
h1{font-size:22px;margin:4px 0 10px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:170px}
.lbl{color:#666;font-size:12px}.big{font-size:22px;font-weight:600}
table.cfg{border-collapse:collapse;margin-top:10px;font-size:13px}table.cfg th{text-align:left;color:#555;padding:1px 14px 1px 0;font-weight:500}
.notes{color:#8a5300;font-size:13px}.intro{color:#555;margin:4px 0 8px}
.grid{display:flex;flex-wrap:wrap;gap:10px}.panel{margin:0;border:1px solid #eee;border-radius:4px;padding:4px}
.panel img{display:block;max-width:100%}.panel.wide{flex-basis:100%}.missing{color:#999;font-style:italic;padding:20px;margin:0;width:340px}
.note{font-size:12px;color:#666;margin:2px 4px}
#vw-controls{display:flex;gap:16px;align-items:center;margin-bottom:8px;flex-wrap:wrap}
#vw-cols{display:flex;gap:8px;overflow-x:auto;align-items:flex-start;padding-bottom:8px}
.traj{flex:1 0 160px;max-width:320px;min-width:0;border:1px solid #ccc;border-radius:5px;background:#fafafa}
.traj h3{font-size:13px;margin:0;padding:5px 8px;border-bottom:1px solid #ddd;background:#f0f0f0}
.traj h3 .won{color:#138a36}.traj h3 .lost{color:#b3261e}
.step{border-bottom:1px solid #e4e4e4;padding:3px 6px;font-size:12px}
.step.grouped{border-left:5px solid rgba(0,0,0,.35)}
.step .obs{color:#333;max-height:20em;overflow:auto}
#vw-cols .txt{white-space:pre-wrap;overflow-wrap:anywhere}
#vw-cols pre.grid{font-family:ui-monospace,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:11px;line-height:1.2;white-space:pre;tab-size:4;overflow-x:auto;margin:1px 0}
.step .st{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11px;color:#777}
.step .act{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:600;margin-top:2px;white-space:pre-wrap}
.step .act.invalid{color:#b3261e;text-decoration:underline wavy}
.step .nums{font-family:ui-monospace,Menlo,Consolas,monospace;color:#444;margin-top:2px}
.step .gl{display:block;font-size:11px;color:#333;font-family:ui-monospace,Menlo,Consolas,monospace;margin-bottom:1px}
.final{padding:3px 6px;font-size:12px;color:#555}
.empty{color:#999;font-style:italic}
"""

# Vanilla JS, no libraries: reads #viewer-data, fills the two selects, renders the columns.
# Colours go only to step groups of size > 1 so a shared colour always means "same anchor state
# seen by several steps" (the rows GiGPO's step-level advantage compares, paper s.4.2).
JS = r"""
(function(){
  var data = JSON.parse(document.getElementById('viewer-data').textContent);
  var PAL = ['#ffd8a8','#b2f2bb','#a5d8ff','#fcc2d7','#d0bfff','#ffec99','#99e9f2','#ffc9c9',
             '#c0eb75','#eebefa','#bac8ff','#ffe066','#8ce99a','#74c0fc','#f783ac','#e599f7'];
  var selI = document.getElementById('vw-iter'), selT = document.getElementById('vw-task');
  var cols = document.getElementById('vw-cols'), info = document.getElementById('vw-info');
  function el(tag, cls, text){ var e = document.createElement(tag); if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text; return e; }
  // Observations: runs of grid rows (a line with a tab, or short symbol rows such as a Sokoban
  // room) go in a <pre class="grid"> that never wraps (it scrolls sideways when too wide), tabs
  // expanded to 4-column stops and the common indent removed; prose lines wrap in a <div class="txt">.
  function expand(line){ var o = ''; for (var i = 0; i < line.length; i++){ var ch = line.charAt(i);
    if (ch === '\t'){ do { o += ' '; } while (o.length % 4); } else o += ch; } return o.replace(/\s+$/, ''); }
  function gridRow(line){ return line.indexOf('\t') >= 0 || (/\S/.test(line) && line.length <= 120 &&
    !/[A-Za-z]{3}/.test(line) && /[^A-Za-z0-9\s]/.test(line)); }
  function textBlock(cls, text, label){
    var box = el('div', cls); if (label) box.appendChild(el('div', 'txt', label));
    var run = [], grid = null;
    function flush(){ if (!run.length) return;
      if (grid){ var pad = Math.min.apply(null, run.map(function(l){ return l.match(/^ */)[0].length; }));
        box.appendChild(el('pre', 'grid', run.map(function(l){ return l.slice(pad); }).join('\n'))); }
      else box.appendChild(el('div', 'txt', run.join('\n')));
      run = []; }
    String(text).split('\n').forEach(function(l){ var g = gridRow(l); if (g !== grid){ flush(); grid = g; } run.push(g ? expand(l) : l); });
    flush(); return box; }
  function num(v){ return (v === null || v === undefined) ? '-' : (v >= 0 ? '+' : '') + v.toFixed(3); }
  function fillTasks(){
    var it = data.iterations[+selI.value]; selT.innerHTML = '';
    it.tasks.forEach(function(t, i){ var o = el('option', null,
      'episode ' + t.episode_id + ': ' + t.task_id + (t.task_type ? ' (' + t.task_type + ')' : ''));
      o.value = i; selT.appendChild(o); });
  }
  function render(){
    var it = data.iterations[+selI.value], task = it.tasks[+selT.value];
    cols.innerHTML = ''; var colour = {}, next = 0, shared = 0, rows = 0;
    task.trajs.forEach(function(tr){ tr.steps.forEach(function(s){ rows++;
      if (s.g >= 0 && s.gs > 1){ shared++; if (!(s.g in colour)) colour[s.g] = PAL[next++ % PAL.length]; } }); });
    task.trajs.forEach(function(tr, j){
      var c = el('div', 'traj'); c.dataset.traj = tr.traj_id;
      var h = el('h3', null, 'rollout ' + (j + 1) + ' (traj ' + tr.traj_id + ') ');
      h.appendChild(el('span', tr.won ? 'won' : 'lost', tr.won ? 'won' : 'not won')); c.appendChild(h);
      tr.steps.forEach(function(s){
        var d = el('div', 'step'); d.dataset.group = s.g; d.dataset.groupSize = s.gs;
        if (s.g >= 0 && s.gs > 1){ d.classList.add('grouped'); d.style.background = colour[s.g];
          d.title = 'anchor-state group ' + s.g + ': ' + s.gs + ' steps in this iteration'; }
        d.appendChild(el('div', 'gl', 't=' + s.t + (s.gs > 1 ? '  group ' + s.g + ' (' + s.gs + ')' : '')));
        d.appendChild(textBlock('obs', s.obs));
        if (s.st) d.appendChild(el('div', 'st', 'state: ' + s.st));
        var a = el('div', 'act' + (s.valid ? '' : ' invalid'), '> ' + s.act); if (!s.valid) a.title = 'invalid action: ' + s.resp;
        d.appendChild(a);
        d.appendChild(el('div', 'nums', 'r ' + num(s.r) + '  A^E ' + num(s.ae) + '  A^S ' + num(s.as) + '  A ' + num(s.a)));
        c.appendChild(d);
      });
      if (tr.final_obs) c.appendChild(textBlock('final', tr.final_obs, 'end:'));
      cols.appendChild(c);
    });
    info.textContent = task.trajs.length + ' rollouts, ' + rows + ' steps; ' + shared +
      ' steps in ' + Object.keys(colour).length + ' shared anchor-state groups (coloured)';
  }
  if (!data.iterations.length){ document.getElementById('vw-controls').style.display = 'none';
    cols.appendChild(el('p', 'empty', data.empty || 'No trajectories were written in this run.'));
    return; }
  data.iterations.forEach(function(it, i){ var o = el('option', null, 'iteration ' + it.iteration); o.value = i; selI.appendChild(o); });
  selI.addEventListener('change', function(){ fillTasks(); render(); });
  selT.addEventListener('change', render);
  fillTasks(); render();
})();
"""


def viewer_html(data_json: str, notes: list[str]) -> str:
    note = "".join(f"<li>{esc(n)}</li>" for n in notes)
    return f"""<section id="viewer"><h2>Trajectory viewer</h2>
<p class="intro">One task's rollouts side by side. Each step shows the observation the action was
taken in, the action, its reward and advantages (A^E episode-level, A^S step-level, A combined).
Steps that share a colour were taken in the same anchor state (a step group of size &gt; 1):
same state, different actions, compared by the step-level advantage. Invalid actions are underlined.</p>
<div id="vw-controls"><label>iteration <select id="vw-iter"></select></label>
<label>task <select id="vw-task"></select></label><span id="vw-info"></span></div>
<div id="vw-cols"></div>
{f'<ul class="notes">{note}</ul>' if note else ""}
<script type="application/json" id="viewer-data">{data_json}</script>
</section>"""


def page(title: str, parts: list[str]) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(parts)
        + f"\n<script>{JS}</script>\n</body></html>\n"
    )
