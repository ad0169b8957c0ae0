// The console's entry point: renders the app into #app (index.html).
import { render } from "preact";
import { App } from "./app";
import "./style.css";

const root = document.getElementById("app");
if (root) {
  root.textContent = "";
  render(<App />, root);
}
