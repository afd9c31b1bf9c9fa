// How far behind the changelog end a partition's replicas are, as the answering node knows
// it: its own replicas now (its `local` list), the others as they reported it at the last
// rebalance (the map's `lags`; a node that held nothing when it joined reported nothing).

// A function (an entry of meta.partitions, a node URL) -> that node's lag on that
// partition in offsets, undefined when it is not known.
export function replicaLags(meta) {
  const own = new Map(meta.local.map((r) => [`${r.table}/${r.partition}`, r.lag]));
  return (p, url) => {
    const key = `${p.table}/${p.partition}`;
    return url === meta.node && own.has(key) ? own.get(key) : p.lags[url];
  };
}

// A table's lag: the most any of its partitions' actives is behind, over the partitions
// whose active's lag is known. A global table is answered by every node from its own copy,
// so where the answering node holds one, its own lag stands for the active's.
// Returns { lag (undefined when none is known), known, partitions }.
export function tableLag(meta, name, global = false) {
  const lag = replicaLags(meta);
  const held = new Set(meta.local.filter((r) => r.table === name).map((r) => r.partition));
  let most;
  let known = 0;
  let partitions = 0;
  for (const p of meta.partitions) {
    if (p.table !== name) continue;
    partitions += 1;
    const url = global && held.has(p.partition) ? meta.node : p.active;
    const l = url ? lag(p, url) : undefined;
    if (l === undefined) continue;
    most = most === undefined ? l : Math.max(most, l);
    known += 1;
  }
  return { lag: most, known, partitions };
}
