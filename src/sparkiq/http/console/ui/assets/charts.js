// Line charts over time with the vendored uPlot (assets/uplot, MIT license).

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

// A chart in `el` of `series` (labels) against time; `update(xs, ys)` redraws it with xs in
// epoch ms and ys one array per series. With `twoScales`, a second series of another
// magnitude (invoices beside sales) gets its own scale, on the right. With `bars`, `step`
// (ms) is the width a lone bar's column stands for (a window's size).
export class TimeChart {
  constructor(el, title, series, { height = 180, unit = "", bars = false, twoScales = false, step = 0 } = {}) {
    this.el = el;
    this.el.classList.add("chart");
    const width = Math.max(260, el.clientWidth || 480);
    const scaleOf = (i) => (twoScales && series.length === 2 && i === 1 ? "y2" : "y");
    const axis = (scale, side) => ({ scale, side, values: (u, ticks) => ticks.map((t) => fmt(t) + unit), size: 60 });
    const axes = [{}, axis("y", 3)];
    if (scaleOf(1) === "y2") axes.push({ ...axis("y2", 1), grid: { show: false } });
    const opts = {
      title,
      width,
      height,
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
      scales: bars
        ? {
            // Bars are centred on their x: the x range reaches half a column past the first
            // and last one, or they would be cut at the plot's edges. (The chart does not
            // zoom, so the range is always the data's.)
            x: { time: true, range: (u) => barRange(u.data[0], step / 1000) },
            // Bars are lengths: their scale starts at zero.
            y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] },
          }
        : { x: { time: true } },
      axes,
      series: [
        {},
        ...series.map((label, i) => ({
          label,
          scale: scaleOf(i),
          stroke: COLORS[i % COLORS.length],
          width: 2,
          // With bars, the first series is drawn as bars, the others as lines over them.
          fill: bars && i === 0 ? COLORS[0] + "33" : undefined,
          points: { show: bars },
          paths: bars && i === 0 ? uPlot.paths.bars({ size: [0.8, 64] }) : undefined,
        })),
      ],
    };
    this.plot = new uPlot(opts, [[], ...series.map(() => [])], el);
    this.resize = () => this.plot.setSize({ width: Math.max(260, el.clientWidth), height });
    window.addEventListener("resize", this.resize);
  }

  update(xs, ys) {
    this.plot.setData([xs.map((x) => x / 1000), ...ys]);
  }

  destroy() {
    window.removeEventListener("resize", this.resize);
    this.plot.destroy();
  }
}

// The x range that holds every bar of a chart whole, for xs in ascending order: uPlot gives
// each bar a column as wide as the narrowest gap between neighbouring xs (the bar fills
// `size[0]` of it, centred on its x), so the range reaches half that gap past the first and
// the last x; a lone x gets a column of `step`. [null, null] (no range) without data.
export function barRange(xs, step) {
  if (!xs.length) return [null, null];
  let gap = Infinity;
  for (let i = 1; i < xs.length; i++) if (xs[i] > xs[i - 1]) gap = Math.min(gap, xs[i] - xs[i - 1]);
  const half = (Number.isFinite(gap) ? gap : step > 0 ? step : 1) / 2;
  return [xs[0] - half, xs[xs.length - 1] + half];
}

function fmt(n) {
  if (n === null || n === undefined) return "";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(0) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}
