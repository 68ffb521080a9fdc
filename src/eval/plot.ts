// EX bar charts (one group of bars per pool, or pool and mode), shared by the selector evaluation
// (`caper eval rerank --strategy selector`) and bench/rerank: one renderer, each caller naming its
// bars and size.

export interface Bar {
  key: string;
  label: string;
  color: string;
}

export const SELECTOR_BARS: readonly Bar[] = [
  { key: 'vote', label: 'Majority vote', color: '#b0b0b0' },
  { key: 'hybrid', label: 'Hybrid', color: '#7aa6d6' },
  { key: 'selector', label: 'Selector', color: '#2f6db3' },
  { key: 'oracle', label: 'Oracle', color: '#5aa05a' },
];

export interface ChartSize {
  width: number;
  height: number;
  /** Space under the plot for group names and the legend. */
  bottom: number;
  /** Horizontal step between legend entries. */
  legendStep: number;
}

/**
 * Grouped bar chart; the y axis starts at a floor below the smallest value. A bar whose value is
 * missing (hybrid without a database) is left out.
 */
export function barChartSvg(
  groups: { name: string; v: Record<string, number | undefined> }[],
  title: string,
  bars: readonly Bar[],
  size: ChartSize,
): string {
  const W = size.width;
  const H = size.height;
  const m = { l: 50, r: 20, t: 40, b: size.bottom };
  const all = groups.flatMap((g) => Object.values(g.v).filter((x): x is number => typeof x === 'number'));
  const lo = Math.max(0, Math.floor((Math.min(...all) - 5) / 10) * 10);
  const hi = Math.min(100, Math.ceil((Math.max(...all) + 2) / 10) * 10);
  const y = (v: number) => m.t + (H - m.t - m.b) * (1 - (v - lo) / (hi - lo));
  const gw = (W - m.l - m.r) / Math.max(1, groups.length);
  const bw = (gw * 0.8) / bars.length;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`);
  for (let t = lo; t <= hi; t += 5) {
    out.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.l - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${t}</text>`);
  }
  out.push(`<text x="14" y="${(m.t + (H - m.b)) / 2}" transform="rotate(-90 14 ${(m.t + (H - m.b)) / 2})" text-anchor="middle">EX (%)</text>`);
  groups.forEach((g, gi) => {
    const x0 = m.l + gi * gw + gw * 0.1;
    bars.forEach((b, bi) => {
      const v = g.v[b.key];
      if (typeof v !== 'number') return;
      const x = x0 + bi * bw;
      out.push(`<rect x="${x.toFixed(1)}" y="${y(v).toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${(y(lo) - y(v)).toFixed(1)}" fill="${b.color}"/>`);
      out.push(`<text x="${(x + bw / 2 - 1).toFixed(1)}" y="${(y(v) - 4).toFixed(1)}" text-anchor="middle" font-size="10">${v.toFixed(1)}</text>`);
    });
    out.push(`<text x="${(x0 + gw * 0.4).toFixed(1)}" y="${H - m.b + 18}" text-anchor="middle" font-size="13">${escapeXml(g.name)}</text>`);
  });
  bars.forEach((b, bi) => {
    const x = m.l + bi * size.legendStep;
    out.push(`<rect x="${x}" y="${H - 28}" width="12" height="12" fill="${b.color}"/>`);
    out.push(`<text x="${x + 16}" y="${H - 18}">${b.label}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

/** The selector evaluation's chart (bench/results/selector.svg). */
export function selectorSvg(groups: { name: string; v: Record<string, number | undefined> }[], title: string): string {
  return barChartSvg(groups, title, SELECTOR_BARS, { width: 720, height: 380, bottom: 80, legendStep: 130 });
}

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export interface LineSeries {
  name: string;
  color: string;
  points: { x: number; y: number }[];
}

const PALETTE = ['#2f6db3', '#d9822b', '#5aa05a', '#b03a48', '#7a5cb3', '#3aa6a6'];

/** Line chart on fixed axes (x and y in [xlo, xhi] / [ylo, yhi]), optionally with the diagonal. */
export function lineChartSvg(series: readonly LineSeries[], title: string, axes: { x: string; y: string; xlo: number; xhi: number; ylo: number; yhi: number; diagonal?: boolean; dots?: boolean }): string {
  const W = 640;
  const H = 440;
  const m = { l: 60, r: 20, t: 40, b: 90 };
  const px = (x: number) => m.l + ((x - axes.xlo) / (axes.xhi - axes.xlo)) * (W - m.l - m.r);
  const py = (y: number) => m.t + (1 - (y - axes.ylo) / (axes.yhi - axes.ylo)) * (H - m.t - m.b);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`);
  for (let k = 0; k <= 5; k++) {
    const xv = axes.xlo + ((axes.xhi - axes.xlo) * k) / 5;
    const yv = axes.ylo + ((axes.yhi - axes.ylo) * k) / 5;
    out.push(`<line x1="${px(xv).toFixed(1)}" x2="${px(xv).toFixed(1)}" y1="${py(axes.ylo).toFixed(1)}" y2="${py(axes.yhi).toFixed(1)}" stroke="#eeeeee"/>`);
    out.push(`<line x1="${px(axes.xlo).toFixed(1)}" x2="${px(axes.xhi).toFixed(1)}" y1="${py(yv).toFixed(1)}" y2="${py(yv).toFixed(1)}" stroke="#eeeeee"/>`);
    out.push(`<text x="${px(xv).toFixed(1)}" y="${(py(axes.ylo) + 16).toFixed(1)}" text-anchor="middle">${+xv.toFixed(2)}</text>`);
    out.push(`<text x="${m.l - 6}" y="${(py(yv) + 4).toFixed(1)}" text-anchor="end">${+yv.toFixed(2)}</text>`);
  }
  out.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - m.b + 36}" text-anchor="middle">${escapeXml(axes.x)}</text>`);
  out.push(`<text x="16" y="${(m.t + H - m.b) / 2}" transform="rotate(-90 16 ${(m.t + H - m.b) / 2})" text-anchor="middle">${escapeXml(axes.y)}</text>`);
  if (axes.diagonal) out.push(`<line x1="${px(axes.xlo)}" y1="${py(axes.ylo)}" x2="${px(axes.xhi)}" y2="${py(axes.yhi)}" stroke="#999" stroke-dasharray="4 4"/>`);
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, k) => `${k ? 'L' : 'M'}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ');
    out.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
    if (axes.dots) for (const p of s.points) out.push(`<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3" fill="${s.color}"/>`);
  }
  series.forEach((s, k) => {
    const x = m.l + (k % 3) * 190;
    const y = H - 34 + Math.floor(k / 3) * 18;
    out.push(`<rect x="${x}" y="${y - 10}" width="12" height="12" fill="${s.color}"/>`);
    out.push(`<text x="${x + 16}" y="${y}">${escapeXml(s.name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

/** Risk-coverage curves (error rate among the answered, most confident first) per pool and mode. */
export function riskCoverageSvg(curves: readonly { name: string; points: { coverage: number; risk: number }[] }[], title: string): string {
  const maxRisk = Math.max(0.05, ...curves.flatMap((c) => c.points.map((p) => p.risk)));
  return lineChartSvg(
    curves.map((c, k) => ({ name: c.name, color: PALETTE[k % PALETTE.length]!, points: c.points.map((p) => ({ x: p.coverage, y: p.risk })) })),
    title,
    { x: 'coverage (share of questions answered)', y: 'risk (share of answered that are wrong)', xlo: 0, xhi: 1, ylo: 0, yhi: Math.ceil(maxRisk * 20) / 20 },
  );
}

/** Reliability diagram: observed accuracy against mean confidence per bin (empty bins left out). */
export function reliabilitySvg(series: readonly { name: string; bins: { n: number; confidence: number; accuracy: number }[] }[], title: string): string {
  return lineChartSvg(
    series.map((s, k) => ({ name: s.name, color: PALETTE[k % PALETTE.length]!, points: s.bins.filter((b) => b.n > 0).map((b) => ({ x: b.confidence, y: b.accuracy })) })),
    title,
    { x: 'mean confidence in bin (10 equal-width bins)', y: 'share right in bin', xlo: 0, xhi: 1, ylo: 0, yhi: 1, diagonal: true, dots: true },
  );
}
