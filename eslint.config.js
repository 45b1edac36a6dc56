// Type-aware lint. The purity rules for src/ name the replacement for each banned API,
// so the error message tells the reader what to inject instead.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

const bannedInCore = [
  {
    selector: "MemberExpression[object.name='Date'][property.name='now']",
    message: "src/ is pure: take nowMs as an argument or through the Clock port.",
  },
  {
    selector: "NewExpression[callee.name='Date'][arguments.length=0]",
    message:
      "src/ is pure: take nowMs as an argument; new Date(ms) of an explicit instant is the only allowed form.",
  },
  {
    selector: "MemberExpression[object.name='Math'][property.name='random']",
    message: "src/ is pure: take randomness through an injected port (seeded in simulation).",
  },
  {
    selector: "MemberExpression[property.name='randomUUID']",
    message: "src/ is pure: ids are derived (digests) or injected through the IdSource port.",
  },
  {
    selector:
      "CallExpression[callee.name=/^(setTimeout|setInterval|setImmediate|queueMicrotask)$/]",
    message: "src/ is pure: the cadence is driven from outside (tick); no timers in the core.",
  },
  {
    selector: "CallExpression[callee.name='fetch']",
    message: "src/ is pure: I/O goes through ports implemented in storage/ or runtimes/.",
  },
];

// Node's built-in modules, under both spellings: `node:*` as a pattern, the bare names exactly
// (as patterns they would also match a folder such as runtimes/http). Code that must run in
// workerd or a browser page (and the core) may import none of them.
const bareNodeBuiltins = [
  "fs",
  "fs/promises",
  "path",
  "child_process",
  "os",
  "crypto",
  "url",
  "util",
  "module",
  "buffer",
  "v8",
  "net",
  "http",
  "https",
  "stream",
  "timers",
  "timers/promises",
  "worker_threads",
];
const noNodeBuiltins = (message) => ({
  paths: bareNodeBuiltins.map((name) => ({ name, message })),
  patterns: [{ group: ["node:*"], message }],
});

/** One no-restricted-imports option with more patterns; a later config object would replace the rule, not add to it. */
const withPatterns = (options, ...patterns) => ({
  ...options,
  patterns: [...options.patterns, ...patterns],
});

const noRuntimesFromStorage = {
  group: ["**/runtimes/**"],
  message:
    "storage/ must not import runtimes/: the runtimes wire storage in, never the other way round.",
};

export default tseslint.config(
  {
    ignores: [
      "dist/**",
      "node_modules/**",
      "coverage/**",
      "test-results/**",
      "storage/*/migrations.generated.ts",
      ".qlr/**",
      ".wrangler/**",
      ".stryker/**",
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ["*.js", "*.mjs", "scripts/*.mjs", "bench/*.mjs"] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_" },
      ],
      "@typescript-eslint/consistent-type-imports": "error",
    },
  },
  {
    files: ["**/*.mjs", "**/*.js"],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    files: ["**/*.mjs", "**/*.js"],
    languageOptions: {
      globals: {
        process: "readonly",
        console: "readonly",
        URL: "readonly",
        setTimeout: "readonly",
        clearTimeout: "readonly",
        Buffer: "readonly",
      },
    },
  },
  {
    files: ["src/**/*.ts"],
    rules: {
      "no-restricted-syntax": ["error", ...bannedInCore],
      "no-restricted-imports": [
        "error",
        withPatterns(
          noNodeBuiltins("src/ is pure: platform modules belong in runtimes/ or storage/."),
          {
            group: ["**/storage/**", "**/runtimes/**"],
            message:
              "src/ must not import storage/ or runtimes/: depend on a port in src/ instead.",
          },
        ),
      ],
    },
  },
  {
    // The isomorphic storage (the SQL stores, the drivers for sql.js in memory, PGlite and
    // Durable Object SQLite, the serial queue) runs on the device, in workerd and in the page.
    files: ["storage/**/*.ts"],
    ignores: ["storage/node/**", "storage/sqljs/node/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        withPatterns(
          noNodeBuiltins(
            "Isomorphic storage: Node-only storage code lives in a node/ folder (storage/node/, storage/sqljs/node/).",
          ),
          noRuntimesFromStorage,
        ),
      ],
    },
  },
  {
    files: ["storage/node/**/*.ts", "storage/sqljs/node/**/*.ts"],
    rules: {
      "no-restricted-imports": ["error", { patterns: [noRuntimesFromStorage] }],
    },
  },
  {
    // The Worker and the pages run in workerd and the browser; the one Hono app serves both and
    // the device. Node-side serving or building of these lives in runtimes/node/ and scripts/.
    files: [
      "runtimes/worker/**/*.ts",
      "runtimes/browser/**/*.ts",
      "runtimes/http/**/*.ts",
      "runtimes/shared/**/*.ts",
    ],
    rules: {
      "no-restricted-imports": [
        "error",
        noNodeBuiltins(
          "runtimes/worker, runtimes/browser, runtimes/http and runtimes/shared run outside Node: use Web APIs, or put Node-side code under runtimes/node/.",
        ),
      ],
    },
  },
);
