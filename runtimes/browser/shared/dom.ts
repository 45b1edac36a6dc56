/// <reference lib="dom" />
/**
 * A few DOM helpers for the dependency-free pages. Text always goes in as text nodes, never
 * as HTML, so nothing the API or a manifest returns can inject markup.
 */

export type Child = Node | string | number | null | undefined | false | readonly Child[];
export type AttrValue = string | number | boolean | null | undefined;
export type Attrs = Record<string, AttrValue | ((event: Event) => void)>;

function append(parent: Node, children: readonly Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child as readonly Child[]);
    else if (child instanceof Node) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child as string | number)));
  }
}

function applyAttrs(element: Element, attrs: Attrs): void {
  for (const [key, value] of Object.entries(attrs)) {
    if (typeof value === "function") {
      element.addEventListener(key.replace(/^on/, "").toLowerCase(), value);
    } else if (value === true) {
      element.setAttribute(key, "");
    } else if (value !== false && value !== null && value !== undefined) {
      element.setAttribute(key, String(value));
    }
  }
}

/** An HTML element: `h("button", {type: "button", onclick: fn}, "Start")`. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  applyAttrs(element, attrs);
  append(element, children);
  return element;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** An SVG element. */
export function s<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG_NS, tag);
  applyAttrs(element, attrs);
  append(element, children);
  return element;
}

/**
 * Replaces a container's children and gives focus back to the element that had it, matched
 * by its `data-key`, so a live refresh never throws a keyboard user out of the page.
 */
export function replaceKeepingFocus(container: Element, ...children: Child[]): void {
  const active = document.activeElement;
  const key =
    active instanceof Element && container.contains(active)
      ? active.getAttribute("data-key")
      : null;
  const fragment = document.createDocumentFragment();
  append(fragment, children);
  container.replaceChildren(fragment);
  if (key !== null) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again instanceof HTMLElement || again instanceof SVGElement)
      again.focus({ preventScroll: true });
  }
}

/** A column of a data table: its heading, and a class for the heading cell when it has one. */
export type Column = string | Node | { readonly label: Child; readonly class: string };

/**
 * A data table in its scrolling wrapper: column headings (`th scope="col"`), then `body`, the
 * table's `tbody` (a caller that refills it later keeps a reference to it). `caption`, when
 * given, names the table for screen readers.
 */
export function dataTable(
  attrs: Attrs,
  columns: readonly Column[],
  body: HTMLTableSectionElement,
  caption?: HTMLTableCaptionElement,
): HTMLDivElement {
  const headings = columns.map((column) =>
    typeof column === "string" || column instanceof Node
      ? h("th", { scope: "col" }, column)
      : h("th", { scope: "col", class: column.class }, column.label),
  );
  return h(
    "div",
    { class: "table-wrap" },
    h("table", attrs, caption, h("thead", {}, h("tr", {}, headings)), body),
  );
}

/** A titled card: a section labelled by its own `h2` (whose id is `id`). */
export function card(title: string, id: string, ...children: Child[]): HTMLElement {
  return h(
    "section",
    { class: "card", "aria-labelledby": id },
    h("h2", { class: "section-title", id }, title),
    ...children,
  );
}
