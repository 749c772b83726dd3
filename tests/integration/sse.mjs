// sse.mjs - the SSE reader the integration tests share: yields
// {id, event, data} for every dispatched event of a response body (an event
// with no data line is not dispatched, as in the HTML standard); comments are
// skipped. Throws when the connection is cut.
export async function* sseEvents(body) {
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev = { id: null, event: null, data: null };
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const c = line.indexOf(":");
        const f = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (f === "id") ev.id = v;
        else if (f === "event") ev.event = v;
        else if (f === "data") ev.data = ev.data === null ? v : ev.data + "\n" + v;
      }
      if (ev.data !== null) yield ev;
    }
  }
}

// Each JSON-RPC message of a response, SSE or JSON, to onMsg (events with
// empty data, such as priming events, carry no message).
export async function readMessages(res, onMsg) {
  if (!(res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    const body = await res.text();
    if (body) [].concat(JSON.parse(body)).forEach(onMsg);
    return;
  }
  for await (const ev of sseEvents(res.body)) if (ev.data) await onMsg(JSON.parse(ev.data));
}
