import { describeStoreContract } from "../storage/store-contract.ts";
import { freshObjectDriver } from "./support.ts";

// The storage contract every driver passes, here on Durable Object SQLite inside workerd.
describeStoreContract({ name: "do-sqlite", open: () => Promise.resolve(freshObjectDriver()) });
