// Type-aware lint. The purity rules for src/ name the replacement for each banned API,
// so the error message tells the reader what to inject instead.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

const bannedInCore = [
  { selector: "MemberExpression[object.name='Date'][property.name='now']", message: "src/ is pure: take nowMs as an argument or through the Clock port." },
  { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: "src/ is pure: take nowMs as an argument; new Date(ms) of an explicit instant is the only allowed form." },
  { selector: "MemberExpression[object.name='Math'][property.name='random']", message: "src/ is pure: take randomness through an injected port (seeded in simulation)." },
  { selector: "MemberExpression[property.name='randomUUID']", message: "src/ is pure: ids are derived (digests) or injected through the IdSource port." },
  { selector: "CallExpression[callee.name=/^(setTimeout|setInterval|setImmediate|queueMicrotask)$/]", message: "src/ is pure: the cadence is driven from outside (tick); no timers in the core." },
  { selector: "CallExpression[callee.name='fetch']", message: "src/ is pure: I/O goes through ports implemented in storage/ or runtimes/." },
];

export default tseslint.config(
  { ignores: ["dist/**", "node_modules/**", "coverage/**", "test-results/**", "storage/*/migrations.generated.ts", ".qlr/**", ".wrangler/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: { allowDefaultProject: ["*.js", "*.mjs", "scripts/*.mjs", "bench/*.mjs"] }, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
    },
  },
  {
    files: ["**/*.mjs", "**/*.js"],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    files: ["**/*.mjs", "**/*.js"],
    languageOptions: { globals: { process: "readonly", console: "readonly", URL: "readonly", setTimeout: "readonly", clearTimeout: "readonly", Buffer: "readonly" } },
  },
  {
    files: ["src/**/*.ts"],
    rules: {
      "no-restricted-syntax": ["error", ...bannedInCore],
      "no-restricted-imports": ["error", { patterns: [
        { group: ["node:*", "fs", "path", "child_process", "os", "crypto"], message: "src/ is pure: platform modules belong in runtimes/ or storage/." },
        { group: ["**/storage/**", "**/runtimes/**"], message: "src/ must not import storage/ or runtimes/: depend on a port in src/ instead." },
      ] }],
    },
  },
);
