// ESLint for the pages' scripts (static/js/, ES modules loaded by <script type="module">,
// no bundler): the recommended rules in a browser, run by `make lint`.
import js from "@eslint/js";
import globals from "globals";

// Each helper is defined once, in static/js/steplab.js, and imported by the pages; a page
// that writes its own again is the drift this rule keeps out.
const SHARED = ["$", "el", "showMessage", "errorText", "describeErrors", "formatWhen", "api"];
const redefined = SHARED.flatMap((name) => [
  {
    selector: `FunctionDeclaration[id.name=${JSON.stringify(name)}]`,
    message: `${name} is shared: import it from "./steplab.js".`,
  },
  {
    selector: `VariableDeclarator[id.name=${JSON.stringify(name)}]`,
    message: `${name} is shared: import it from "./steplab.js".`,
  },
]);

export default [
  { ignores: ["node_modules/", "staticfiles/", "htmlcov/", ".venv/"] },
  js.configs.recommended,
  {
    files: ["static/js/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: { ...globals.browser },
    },
  },
  {
    files: ["static/js/**/*.js"],
    ignores: ["static/js/steplab.js"],
    rules: { "no-restricted-syntax": ["error", ...redefined] },
  },
  {
    files: ["eslint.config.js"],
    languageOptions: { sourceType: "module", globals: { ...globals.node } },
  },
];
