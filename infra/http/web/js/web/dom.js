// DOM helpers: every text goes in as a Text node, never as markup, so a turn
// holding `<script>` or `<img onerror=...>` is shown, not run.
export function el(tag, attributes = {}, ...children) {
    const element = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
        if (value === undefined || value === false)
            continue;
        element.setAttribute(name, value === true ? "" : value);
    }
    append(element, ...children);
    return element;
}
export function append(parent, ...children) {
    for (const child of children) {
        if (child === null || child === undefined || child === false)
            continue;
        parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
}
export function replaceChildren(parent, ...children) {
    parent.replaceChildren();
    append(parent, ...children);
}
export function byId(id) {
    const element = document.getElementById(id);
    if (element === null)
        throw new Error(`#${id} is missing from the page`);
    return element;
}
export function shortId(id) {
    return id.length > 8 ? id.slice(0, 8) : id;
}
