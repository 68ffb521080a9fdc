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
