import { describeStoreContract } from "../storage/store-contract.ts";
import { DO_SQLITE } from "./support.ts";

// The storage contract every driver passes, here on Durable Object SQLite inside workerd.
describeStoreContract(DO_SQLITE);
