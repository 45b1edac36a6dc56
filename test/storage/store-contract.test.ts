import { DRIVERS } from "../support/drivers.ts";
import { describeStoreContract } from "./store-contract.ts";

for (const factory of DRIVERS) describeStoreContract(factory);
