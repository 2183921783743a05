// A small, safe markdown subset for model replies and the person's own messages, built as DOM
// nodes: never innerHTML, so no text from a user or a model can become markup. Blocks:
// paragraphs, # headings, ``` fences, - and 1. lists, > quotes. Inline: `code`, **bold**,
// *italic* / _italic_, [text](http(s)/mailto link).
"use strict";

(function (global) {
  const SAFE_LINK = /^(https?:\/\/|mailto:)/i;

  function el(tag, children) {
    const node = document.createElement(tag);
    for (const child of children || []) node.append(child);
    return node;
  }

  // Inline spans, left to right: the earliest match wins, its inside parsed again (not code's).
  const INLINE = [
    { re: /`([^`\n]+)`/, make: (m) => { const c = el("code"); c.textContent = m[1]; return c; } },
    { re: /\*\*([^*\n]+)\*\*/, make: (m) => el("strong", inline(m[1])) },
    { re: /\[([^\]\n]+)\]\(([^)\s]+)\)/, make: (m) => {
        if (!SAFE_LINK.test(m[2])) return document.createTextNode(m[0]);
        const a = el("a", inline(m[1]));
        a.href = m[2]; a.rel = "noopener noreferrer nofollow"; a.target = "_blank";
        return a;
      } },
    { re: /(?:^|(?<=[\s(]))\*([^*\s][^*\n]*?)\*/, make: (m) => el("em", inline(m[1])) },
    { re: /(?:^|(?<=[\s(]))_([^_\s][^_\n]*?)_(?![A-Za-z0-9])/, make: (m) => el("em", inline(m[1])) },
  ];

  function inline(text) {
    const out = [];
    let rest = text;
    while (rest) {
      let best = null;
      for (const rule of INLINE) {
        const m = rule.re.exec(rest);
        if (m && (best === null || m.index < best.m.index)) best = { m, rule };
      }
      if (best === null) { out.push(document.createTextNode(rest)); break; }
      if (best.m.index > 0) out.push(document.createTextNode(rest.slice(0, best.m.index)));
      out.push(best.rule.make(best.m));
      rest = rest.slice(best.m.index + best.m[0].length);
    }
    return out;
  }

  function withBreaks(lines) {
    const out = [];
    lines.forEach((line, i) => { if (i) out.push(el("br")); out.push(...inline(line)); });
    return out;
  }

  function render(text) {
    const frag = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (/^\s*$/.test(line)) { i++; continue; }
      const fence = /^\s*```(.*)$/.exec(line);
      if (fence) {
        const body = [];
        i++;
        while (i < lines.length && !/^\s*```\s*$/.test(lines[i])) body.push(lines[i++]);
        i++; // the closing fence (or the end of a reply still streaming)
        const code = el("code"); code.textContent = body.join("\n");
        if (fence[1].trim()) code.dataset.lang = fence[1].trim();
        frag.append(el("pre", [code]));
        continue;
      }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      if (heading) {
        frag.append(el("h" + Math.min(6, heading[1].length + 2), inline(heading[2])));
        i++;
        continue;
      }
      const listItem = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;
      if (listItem.test(line)) {
        const ordered = /^\s*\d/.test(line);
        const list = el(ordered ? "ol" : "ul");
        while (i < lines.length && listItem.test(lines[i]) && /^\s*\d/.test(lines[i]) === ordered) {
          list.append(el("li", inline(listItem.exec(lines[i])[2])));
          i++;
        }
        frag.append(list);
        continue;
      }
      if (/^\s*>/.test(line)) {
        const quoted = [];
        while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
        frag.append(el("blockquote", [render(quoted.join("\n"))]));
        continue;
      }
      const para = [];
      while (i < lines.length && !/^\s*$/.test(lines[i]) && !/^\s*```/.test(lines[i]) &&
             !/^#{1,6}\s/.test(lines[i]) && !listItem.test(lines[i]) && !/^\s*>/.test(lines[i])) {
        para.push(lines[i++]);
      }
      frag.append(el("p", withBreaks(para)));
    }
    return frag;
  }

  global.SigilMarkdown = { render };
})(window);
