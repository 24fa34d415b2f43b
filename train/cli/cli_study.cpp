// train/cli/cli_study.cpp — `ctxlab study`: runs the grid of a study file (train/cli/study_spec.h)
// as a list of jobs, each a child `ctxlab` process (an argument vector, no shell) whose output goes
// to OUT/logs/JOB.log, and summarises the results (train/cli/study_summary.h). A job is skipped
// when its output is complete, so running the same command again after an interruption (Ctrl-C,
// kill, --max-jobs) resumes where it stopped; a half-trained run resumes from its checkpoint.
//
// OUT/study.json             the study file as given (a later run must give the same study)
// OUT/data/{train,val}.txt   the split: models and tokenizer see train.txt only
// OUT/tokenizer.model        when the study names one (trained on train.txt)
// OUT/tokenizers/NAME.model  each of its "tokenizers" (trained on train.txt), for the encodings naming it
// OUT/runs/ENC/seedS/        one training run per encoding and seed
// OUT/runs/ENC+FT/seedS/     a fine-tune of it ("finetunes"), from its final checkpoint
// OUT/eval/CELL/seedS*.json  eval of each run (CELL = ENC, or ENC+NAME of a scaling, a variant or a
//                            fine-tune): ppl, per-position, tasks
// OUT/summary.{md,json}, OUT/{ppl,tasks,positions}.csv   mean +- 95% t interval over the seeds
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "train/cli/cli.h"
#include "train/cli/cli_common.h"
#include "train/cli/plugin.h"
#include "train/cli/study_spec.h"
#include "train/cli/study_summary.h"
#include "train/data.h"
#include "train/io/fileio.h"
#include "train/io/safetensors.h"
#include "train/run_dir.h"
#include "train/run_log.h"

namespace ctx::cli {
namespace {

namespace fs = std::filesystem;

struct Job {
  std::string name;               // e.g. "train rope seed 1" (also its log's name, spaces as '_')
  std::vector<std::string> args;  // after the program: the verb and its options
  std::function<bool()> done;     // its output is complete
  std::string run_dir;            // train / finetune jobs: resumed from its checkpoint when it has one
  int64_t steps = 0;              // ... up to this step
};

void add_options(std::vector<std::string>& a, const OptionArgs& opts) {
  for (const auto& [k, v] : opts) {
    a.push_back("--" + k);
    if (!v.empty()) a.push_back(v);
  }
}

bool exists(const std::string& p) { return fs::exists(fs::path(p)); }

// The step a run's checkpoint is at, -1 when there is none.
int64_t checkpoint_step(const std::string& dir) {
  const std::string p = dir + "/model.safetensors";
  if (!exists(p)) return -1;
  const SafetensorsFile f = load_safetensors(p);
  auto it = f.metadata.find("step");
  CTX_CHECK(it != f.metadata.end(), p, ": __metadata__.step missing (not a ctxlab checkpoint)");
  return std::stoll(it->second);
}

Job train_job(const StudySpec& s, const StudySpec::Encoding& e, uint64_t seed, const std::string& out) {
  const std::string dir = out + "/runs/" + e.name + "/seed" + std::to_string(seed);
  Job j{str("train ", e.name, " seed ", seed), {}, [dir, steps = s.steps] { return checkpoint_step(dir) >= steps; }, dir,
        s.steps};
  j.args = {"train", "--preset", s.preset, "--steps", std::to_string(s.steps), "--posenc",
            e.posenc.is_string() ? e.posenc.get<std::string>() : e.posenc.dump(), "--seed", std::to_string(seed),
            "--data", out + "/data/train.txt", "--out", dir, "--quiet", "--no-plot"};
  if (s.context > 0) j.args.insert(j.args.end(), {"--set", "context=" + std::to_string(s.context)});  // the model's L
  for (const auto& kv : s.model_set) j.args.insert(j.args.end(), {"--set", kv.first + "=" + kv.second});
  const std::string tok = study_tokenizer_path(s, e, out);
  if (!tok.empty()) j.args.insert(j.args.end(), {"--tokenizer", tok});
  add_options(j.args, s.train_args);
  return j;
}

// A fine-tune cell's job: `ctxlab finetune` of the encoding's trained run (the same seed) at the
// fine-tune's context, on the training split; done when its checkpoint is at the last step.
Job finetune_job(const StudySpec::Finetune& f, const StudyCell& c, uint64_t seed, const std::string& out) {
  const std::string base = out + "/runs/" + c.enc->name + "/seed" + std::to_string(seed);
  const std::string dir = out + "/runs/" + c.name + "/seed" + std::to_string(seed);
  Job j{str("finetune ", c.name, " seed ", seed), {}, [dir, steps = f.steps] { return checkpoint_step(dir) >= steps; },
        dir, f.steps};
  j.args = {"finetune", "--checkpoint", base + "/model.safetensors", "--context", std::to_string(f.length)};
  if (!f.scaling.empty()) j.args.insert(j.args.end(), {"--rope-scaling", f.scaling});
  if (!f.scaling.empty() && !f.factor_default && f.factor > 0) j.args.insert(j.args.end(), {"--factor", str(f.factor)});
  j.args.insert(j.args.end(), {"--steps", std::to_string(f.steps), "--seed", std::to_string(seed), "--data",
                               out + "/data/train.txt", "--out", dir, "--quiet", "--no-plot"});
  add_options(j.args, f.args);
  return j;
}

// The checkpoint a cell evaluates: its fine-tuned run's, else its encoding's trained run's.
std::string cell_checkpoint(const StudyCell& c, uint64_t seed, const std::string& out) {
  return out + "/runs/" + (c.finetune ? c.name : c.enc->name) + "/seed" + std::to_string(seed) + "/model.safetensors";
}

// The jobs of one trained run: perplexity (+ per-position) and each task, for each cell of its
// encoding (alone, under each scaling when it is rotary, fine-tuned: after its finetune job), one
// per slice of lengths.
void eval_jobs(const StudySpec& s, const StudySpec::Encoding& e, uint64_t seed, const std::string& out,
               std::vector<Job>& jobs) {
  for (const StudyCell& c : study_cells(s)) {
    if (c.enc != &e) continue;
    if (c.finetune) jobs.push_back(finetune_job(*c.finetune, c, seed, out));
    const std::string ckpt = cell_checkpoint(c, seed, out);
    const std::string dir = out + "/eval/" + c.name;
    for (const EvalSlice& sl : eval_slices(s, c)) {
      std::string lengths;
      for (int64_t L : sl.lengths) lengths += (lengths.empty() ? "" : ",") + std::to_string(L);
      std::vector<std::string> base = {"eval", "--checkpoint", ckpt, "--data", out + "/data/val.txt", "--lengths", lengths};
      if (c.scaling) base.insert(base.end(), {"--rope-scaling", c.scaling->value});
      if (sl.factor > 0) base.insert(base.end(), {"--factor", str(sl.factor)});
      add_options(base, s.eval_args);
      add_options(base, e.eval_args);
      if (c.variant) add_options(base, c.variant->eval_args);
      const std::string what = str(c.name, " seed ", seed, sl.suffix.empty() ? "" : " length " + lengths);
      const std::string ppl = dir + "/" + study_ppl_file(seed, sl.suffix);
      Job j{"eval " + what, base, [ppl] { return exists(ppl); }, "", 0};
      j.args.insert(j.args.end(), {"--json", ppl});
      if (s.per_position) j.args.push_back("--per-position");
      jobs.push_back(j);
      for (const StudyTask& t : s.tasks) {
        const std::string tj = dir + "/" + study_task_file(seed, t.name, sl.suffix);
        Job k{"eval " + what + " task " + t.name, base, [tj] { return exists(tj); }, "", 0};
        k.args.insert(k.args.end(), {"--task", t.name, "--depths", t.depths, "--trials", std::to_string(t.trials),
                                     "--seed", std::to_string(seed), "--json", tj});
        add_options(k.args, t.args);
        jobs.push_back(k);
      }
    }
  }
}

// A job training a tokenizer on the training split, done when its model file exists.
Job tokenizer_job(const std::string& name, const std::string& type, int64_t vocab, const std::string& tok,
                  const std::string& out) {
  return {name,
          {"tokenizer", "train", "--data", out + "/data/train.txt", "--vocab", std::to_string(vocab), "--type", type,
           "--out", tok},
          [tok] { return exists(tok); },
          "",
          0};
}

std::vector<Job> study_jobs(const StudySpec& s, const std::string& out) {
  std::vector<Job> jobs;
  if (!s.tokenizer_type.empty())
    jobs.push_back(tokenizer_job("tokenizer", s.tokenizer_type, s.tokenizer_vocab, out + "/tokenizer.model", out));
  for (const auto& t : s.tokenizers)
    jobs.push_back(tokenizer_job("tokenizer " + t.name, t.type, t.vocab, out + "/tokenizers/" + t.name + ".model", out));
  for (const auto& e : s.encodings)
    for (uint64_t seed : s.seeds) {
      jobs.push_back(train_job(s, e, seed, out));
      eval_jobs(s, e, seed, out, jobs);
    }
  return jobs;
}

// OUT/study.json: written on the first run; a later run must bring the same study.
void claim_out(const std::string& out, const std::string& study_file, const std::string& text) {
  fs::create_directories(out + "/data");
  fs::create_directories(out + "/logs");
  const std::string saved = out + "/study.json";
  if (exists(saved)) {
    const std::string before = read_file(saved, "saved study");
    CTX_CHECK(before == text, out, " holds another study (", saved, " differs from ", study_file,
              "): give a new --out, or remove ", out, " to start over");
    return;
  }
  write_file_atomic(saved, {{text.data(), text.size()}}, "study file copy");
}

// OUT/data/train.txt and val.txt: the split every job uses.
void split_corpus(const StudySpec& s, const std::string& out) {
  const std::string tr = out + "/data/train.txt", va = out + "/data/val.txt";
  if (exists(tr) && exists(va)) return;
  const std::string data = s.data.empty() ? default_corpus_path() : s.data;
  const auto [train, val] = split_text(read_file(data, "study corpus (\"data\")"), s.val_fraction);
  write_file_atomic(tr, {{train.data(), train.size()}}, "study training split");
  write_file_atomic(va, {{val.data(), val.size()}}, "study validation split");
  std::printf("study: %s split: %zu bytes to train on, %zu held out\n", data.c_str(), train.size(), val.size());
}

std::string log_name(const std::string& job) {
  std::string n = job;
  for (char& c : n)
    if (c == ' ' || c == '+') c = '_';
  return n + ".log";
}

// The program and its first arguments for a child: this executable, loading the plugins this
// process loaded (`ctxlab --plugin X study ...`: every job can build X's encodings).
std::vector<std::string> child_program(const std::string& exe) {
  std::vector<std::string> a = {exe};
  for (const std::string& p : loaded_plugin_paths()) a.insert(a.end(), {"--plugin", p});
  return a;
}

// Runs the job; a failure is an error that names the job and its log (with its last lines).
void run_job(const Job& j, const std::string& out, size_t index, size_t total) {
  std::vector<std::string> args = child_program("/proc/self/exe");
  if (!j.run_dir.empty() && checkpoint_step(j.run_dir) >= 0) {
    // interrupted: go on to the job's last step (a fine-tune's run dir resumes as a training run)
    args.insert(args.end(), {"train", "--resume", j.run_dir, "--steps", std::to_string(j.steps), "--quiet", "--no-plot"});
  } else {
    args.insert(args.end(), j.args.begin(), j.args.end());
    if (!j.run_dir.empty() && exists(j.run_dir)) args.push_back("--force");  // killed before its first checkpoint
  }
  const std::string log = out + "/logs/" + log_name(j.name);
  std::printf("study: [%zu/%zu] %s ...", index, total, j.name.c_str());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = spawn_wait_logged(args, log);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(" %s (%.1f s)\n", rc == 0 ? "done" : "FAILED", sec);
  std::fflush(stdout);
  if (rc == 0) return;
  std::string tail = exists(log) ? read_file(log, "job log") : std::string();
  if (tail.size() > 1000) tail = "..." + tail.substr(tail.size() - 1000);
  std::fprintf(stderr, "--- the end of %s ---\n", log.c_str());
  size_t a = 0;  // line by line: each echoed with its control characters escaped
  for (size_t b; (b = tail.find('\n', a)) != std::string::npos || a < tail.size(); a = b + 1) {
    if (b == std::string::npos) b = tail.size();
    std::fprintf(stderr, "%s\n", escape_control(tail.substr(a, b - a)).c_str());
  }
  throw Error(str("study: job '", j.name, "' failed (exit ", rc, "; its output above, all of it in ", log,
                  "); fix the study file and run the same command again: finished jobs are kept"));
}

cxxopts::Options study_options() {
  cxxopts::Options o(
      "ctxlab study",
      "Run a grid of experiments from a study file: each encoding x seed trained on the training split,\n"
      "evaluated on the held-out split at every length (perplexity, per-position loss), under each RoPE\n"
      "scaling (the rotary encodings, or those a scaling's \"encodings\" names), with each \"variants\"\n"
      "entry's eval options (baselines such as --window, no training), and on each retrieval task;\n"
      "each \"finetunes\" entry fine-tunes the trained run (`ctxlab finetune`, at a longer context, with\n"
      "a RoPE scaling or without) and evaluates the result the same way (a cell such as \"rope + pi s=4 ft 300@4L\"); then the mean and 95% t\n"
      "interval over the seeds, and which differences are significant (Welch's t-test), in\n"
      "OUT/summary.md, .json and CSV files for plots. Every job is a `ctxlab` child process logged to OUT/logs/; run the same\n"
      "command again to resume an interrupted study (finished jobs are skipped). The jobs load the\n"
      "plugins of `ctxlab --plugin LIB study ...`.\n"
      "The study file (docs/evaluation.md, \"ctxlab study\"; examples/studies/):\n"
      "  {\"train\": {\"preset\": \"tiny\", \"context\": 64, \"steps\": 300, \"args\": {\"lr\": 0.003}},\n"
      "   \"encodings\": {\"rope\": \"rope\", \"alibi\": {\"type\": \"alibi\"}},\n"
      "   \"scalings\": {\"pi\": {\"type\": \"pi\", \"factor\": \"len/L\"},\n"
      "                \"yarn\": {\"type\": \"yarn\", \"factor\": 4, \"encodings\": [\"rope\"]}},\n"
      "   \"variants\": {\"window\": {\"eval\": {\"window\": 64}, \"encodings\": [\"rope\"]}},\n"
      "   \"finetunes\": {\"pi_ft\": {\"scaling\": {\"type\": \"pi\", \"factor\": \"len/L\"}, \"length\": \"4L\", \"steps\": 100,\n"
      "                              \"args\": {\"lr\": 0.0003, \"batch\": 2}}},\n"
      "   \"seeds\": [1, 2, 3], \"lengths\": [64, 128, 256],\n"
      "   \"tasks\": {\"passkey\": {\"depths\": [0, 0.5, 1], \"trials\": 20}}}\n"
      "A \"tokenizers\" entry ({\"bpe4k\": {\"type\": \"bpe\", \"vocab\": 4000}}) is trained on the training split,\n"
      "and an encoding naming it ({\"bpe_rope\": {\"posenc\": \"rope\", \"tokenizer\": \"bpe4k\"}}) trains with it:\n"
      "byte and word-piece runs in one grid (examples/studies/extrapolation.json).\n"
      "\n"
      "examples:\n"
      "  ctxlab study --study examples/studies/quick.json --out runs/study\n"
      "  ctxlab study --study examples/studies/quick.json --out runs/study --dry-run   # list the jobs");
  o.add_options()("study", "the study file (JSON), e.g. examples/studies/quick.json", cxxopts::value<std::string>())(
      "out", "the study directory (created; an existing one must hold the same study: then it resumes)",
      cxxopts::value<std::string>())(
      "max-jobs", "run at most N jobs this time (0 = all), then stop as an interruption would, e.g. 5",
      cxxopts::value<int64_t>()->default_value("0"))(
      "dry-run", "list the jobs (and which are done) without running them")("h,help", "this help");
  return o;
}

}  // namespace

int run_study(int argc, char** argv) {
  cxxopts::Options o = study_options();
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  require(*r, "study", o);
  require(*r, "out", o);
  const std::string file = (*r)["study"].as<std::string>(), out = (*r)["out"].as<std::string>();
  const int64_t max_jobs = (*r)["max-jobs"].as<int64_t>();
  CTX_CHECK(max_jobs >= 0, "--max-jobs must be >= 0 (0 = all), got ", max_jobs);
  const std::string text = read_file(file, "study file");
  const StudySpec spec = read_study(file);
  const std::vector<Job> jobs = study_jobs(spec, out);
  if (r->count("dry-run")) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      std::string cmd;
      std::vector<std::string> a = child_program("ctxlab");
      a.insert(a.end(), jobs[i].args.begin(), jobs[i].args.end());
      for (const std::string& x : a) cmd += (cmd.empty() ? "" : " ") + x;
      std::printf("[%zu/%zu] %s%s\n    %s\n", i + 1, jobs.size(), jobs[i].name.c_str(),
                  exists(out) && jobs[i].done() ? " (done)" : "", cmd.c_str());
    }
    return 0;
  }
  claim_out(out, file, text);
  for (const StudyCell& cell : study_cells(spec)) fs::create_directories(out + "/eval/" + cell.name);
  if (!spec.tokenizers.empty()) fs::create_directories(out + "/tokenizers");
  split_corpus(spec, out);
  int64_t ran = 0, skipped = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].done()) {
      ++skipped;
      continue;
    }
    if (max_jobs > 0 && ran == max_jobs) {
      std::printf("study: stopped after %lld jobs (--max-jobs); %zu of %zu to go: run the same command to resume\n",
                  (long long)ran, jobs.size() - i, jobs.size());
      return 3;
    }
    run_job(jobs[i], out, i + 1, jobs.size());
    ++ran;
  }
  std::printf("study: %zu jobs, %lld run now, %lld done before\n", jobs.size(), (long long)ran, (long long)skipped);
  write_study_summary(spec, out);
  return 0;
}

}  // namespace ctx::cli
