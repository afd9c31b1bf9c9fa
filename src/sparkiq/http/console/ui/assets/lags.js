// How far behind the changelog end a partition's replicas are, as the answering node knows
// it: its own replicas now (its `local` list); with `peers` (GET /v1/metadata?peers=true)
// the other nodes' own replicas now too, as each told the answering node; else, and for a
// peer that did not answer, as the nodes reported it at the last rebalance (the map's
// `lags`; a node that held nothing when it joined reported nothing).

// url -> Map("table/partition" -> lag) of the nodes that told their own figures now.
function currentLags(meta) {
  const byNode = new Map();
  const add = (url, local) => byNode.set(url, new Map((local || []).map((r) => [`${r.table}/${r.partition}`, r.lag])));
  add(meta.node, meta.local);
  for (const [url, peer] of Object.entries(meta.peers || {})) {
    if (peer && !peer.error && url !== meta.node) add(url, peer.local);
  }
  return byNode;
}

// The nodes asked for their figures (`peers`) that did not answer.
export function silentPeers(meta) {
  return new Set(Object.entries(meta.peers || {}).filter(([, peer]) => !peer || peer.error).map(([url]) => url));
}

// A function (an entry of meta.partitions, a node URL) -> that node's lag on that
// partition in offsets, undefined when it is not known.
export function replicaLags(meta) {
  const now = currentLags(meta);
  return (p, url) => {
    const own = now.get(url);
    const key = `${p.table}/${p.partition}`;
    return own && own.has(key) ? own.get(key) : p.lags[url];
  };
}

// A table's lag: the most any of its partitions' actives is behind, over the partitions
// whose active's lag is known. A global table is answered by every node from its own copy,
// so where the answering node holds one, its own lag stands for the active's.
// Returns { lag (undefined when none is known), known, partitions, silent }: `silent` the
// actives asked for their figures that did not answer (their lag, if any, is the one they
// reported at the last rebalance), sorted.
export function tableLag(meta, name, global = false) {
  const lag = replicaLags(meta);
  const asked = silentPeers(meta);
  const held = new Set(meta.local.filter((r) => r.table === name).map((r) => r.partition));
  const silent = new Set();
  let most;
  let known = 0;
  let partitions = 0;
  for (const p of meta.partitions) {
    if (p.table !== name) continue;
    partitions += 1;
    const url = global && held.has(p.partition) ? meta.node : p.active;
    if (url && asked.has(url)) silent.add(url);
    const l = url ? lag(p, url) : undefined;
    if (l === undefined) continue;
    most = most === undefined ? l : Math.max(most, l);
    known += 1;
  }
  return { lag: most, known, partitions, silent: [...silent].sort() };
}
