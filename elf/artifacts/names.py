"""The names one stage writes and another reads: file names, store attributes, record keys and the
fields of provenance headers. Spelled here once; writers, readers, the audit and the report import
them rather than spelling a name again.

Each group says who writes it and who reads it.
"""

# --------------------------------------------------------------------------------------------------
# A run directory R/runs/<run>/: `train`, `distill`, `release` write; `sample`, `distill`, the
# report (T6-T8, F7c, F9b) and the audit read
# --------------------------------------------------------------------------------------------------
EMA_WEIGHTS = "ema.safetensors"      # the weights every stage after training reads
RAW_WEIGHTS = "model.safetensors"    # the raw (non-EMA) weights
RUN_CONFIG = "config.json"           # model config, run settings, inputs (``RUN_*`` keys below)
TRAIN_LOG = "train_log.jsonl"        # one JSON line per logged step
RESUME_DIR = "resume"                # exact-resume state while training
TOKENS_FILE = "tokens.json"          # a distillation round's training tokens (``TOKENS_*`` below)
CHECKSUMS = "checksums.json"         # beside weight files: {name: {"bytes", "sha256"}}

# config.json keys read outside the stage that writes them
RUN_MODEL = "model"                  # ModelConfig fields (the network rebuilds from them)
RUN_SETTINGS = "run"                 # the resolved RunSettings
RUN_DATASET = "dataset"
RUN_EMBEDDING = "embedding"
RUN_STORE = "store"                  # the train store's path (cached embeddings)
RUN_STORE_IDENTITY = "store_identity"        # that store's STORE_IDENTITY_SHA256
RUN_TOKENS = "tokens"                # uncached embeddings: the packed tokens' path
RUN_TOKENS_FINGERPRINT = "tokens_fingerprint"
RUN_STATS = "normalization_stats"    # the statistics the run normalised with
RUN_TOKENIZER = "tokenizer"
RUN_PRECISION = "precision"
RUN_PARAMETERS = "num_parameters"    # the network's parameter count (report T6/T7)
RUN_TRAIN_ROWS = "train_rows"        # rows of the training data (an epoch; report T6-T8 valid tokens)
RUN_RELEASED = "released"            # a released checkpoint's origin

# tokens.json keys (``elf.artifacts.records.token_record``)
TOKENS_ROUNDS = "rounds"
TOKENS_TEACHER_SEEN = "teacher_tokens_seen"

# --------------------------------------------------------------------------------------------------
# A separate decoder R/decoders/<name>/: `decoder` writes, `sample` reads
# --------------------------------------------------------------------------------------------------
DECODER_WEIGHTS = "model.safetensors"
DECODER_CONFIG = "config.json"

# --------------------------------------------------------------------------------------------------
# Model and data folders (tokenizer, encoder, scorer, packed tokens, corpora)
# --------------------------------------------------------------------------------------------------
PROVENANCE_FILE = "provenance.json"  # every folder a stage writes whole
TOKENIZER_FILE = "tokenizer.json"    # hashed to identify a local tokenizer
# A tokenizer as recorded by a store identity, a checkpoint config and a packed-token provenance
TOKENIZER_SHA256 = "tokenizer_sha256"
ENCODER_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # hashed into a store identity

# --------------------------------------------------------------------------------------------------
# Embedding store attributes (Zarr group): `embed` writes; `train`, `distill`, `decoder`, `sample`
# and the audit read
# --------------------------------------------------------------------------------------------------
STORE_IDENTITY = "identity"                # settings, encoder, tokenizer, source data
STORE_IDENTITY_SHA256 = "identity_sha256"  # hash of layout + identity
STORE_LAYOUT = "layout"
STORE_COMPLETE = "complete"
STORE_STATS = "normalization_stats"
STORE_TOKEN_IDS_SHA256 = "token_ids_sha256"
STORE_FILES = "data_files"                 # per array, [data files, bytes] at finalize
STORE_SOURCE = "source"                    # identity key: {"tokens", "split", fingerprint...}
STORE_TOKENIZER = "tokenizer"              # identity key: {"name_or_path", "tokenizer_sha256"}
STORE_ENCODER = "encoder"                  # identity key: {"name_or_path", "weights_sha256", ...}
ENCODER_WEIGHTS_SHA256 = "weights_sha256"  # ... the sha256 of a local encoder's weights
# The fingerprint of packed tokens (a store's source, an uncached run's tokens): one of
DATASETS_FINGERPRINT = "datasets_fingerprint"  # `datasets`' own fingerprint of the split, or
TOKENS_SHA256 = "tokens_sha256"                # the sha256 of its token arrays

# --------------------------------------------------------------------------------------------------
# Records: samples files, score files, aggregates (`evaluate` writes; the report and audit read)
# --------------------------------------------------------------------------------------------------
PROVENANCE = "provenance"            # every record's provenance (a samples file's first line)
METRICS = "metrics"                  # score and aggregate: {name: value} / {name: {mean, se, ...}}
SAMPLES_HEADER = "samples_provenance"  # a score file's copy of its samples file's header
PER_SAMPLE = "per_sample"            # a score file's values per sample
PER_SEED = "per_seed"                # an aggregate metric's value per evaluation seed
SCORES = "scores"                    # an aggregate's provenance: [{"path", "sha256"}] it averaged
SCORED_SAMPLES = "samples"           # a score's provenance: the samples file it scored ...
SAMPLES_SHA256 = "samples_sha256"    # ... and its sha256
SCORER = "scorer"                    # a score's provenance: the scorer folder or Hub name ...
SCORER_SHA256 = "scorer_sha256"      # ... the sha256 of a local scorer folder's files
SCORER_CONFIG_SHA256 = "scorer_config_sha256"  # ... or a Hub scorer's config
REFERENCE_KIND = "reference_texts"   # the samples header of scored real text ("Dataset" line)
TEXTS_SHA256 = "texts_sha256"        # ... the hash of those texts, and the tokenizer that decoded
REFERENCE_TOKENIZER = "tokenizer"    # ... them from the rows' token ids (None: a text column)

# The samples header (first line of a samples file), `elf sample`
HEADER_CHECKPOINT = "checkpoint"
HEADER_CHECKPOINT_SHA256 = "checkpoint_sha256"
HEADER_RUN_CONFIG_SHA256 = "run_config_sha256"
HEADER_DECODER_SHA256 = "decoder_sha256"
HEADER_STORE_IDENTITY = "eval_store_identity"
# Fields that decide a samples file's rows: a partial or finished file with other values is stale
# (batch k draws from generator (seed, k) in one draw of batch_size rows).
HEADER_SAMPLE_INPUTS = (HEADER_CHECKPOINT_SHA256, "sampler_settings", "precision", "seed", "n",
                        "batch_size", HEADER_DECODER_SHA256)

# --------------------------------------------------------------------------------------------------
# Report sidecars <reports>/{figures,tables}/<id>.json: the report writes, the manifest and the
# audit read
# --------------------------------------------------------------------------------------------------
SIDECAR_FILES = "files"
SIDECAR_AGGREGATES = "aggregates"
SIDECAR_DATASET_SCORES = "dataset_scores"
SIDECAR_PAPER_VALUES = "paper_values"
SIDECAR_RUN_METADATA = "run_metadata"
SIDECAR_SHOWN = "qualitative_inputs"
