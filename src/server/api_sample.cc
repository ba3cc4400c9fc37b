// Text from a character-level job (one trained on a text dataset), through its latest
// snapshot (or ?iter=N):
//   POST /api/jobs/<id>/sample  {"primer": "...", "length": N, "temperature": T, "seed": S}
//     -> {"text": primer + what the net wrote, "iter", "characters", "seconds"}
// The same request gives the same text (CharSampler draws from the seed).
#include <fmt/format.h>

#include <chrono>
#include <mutex>

#include "data/text_corpus.h"
#include "engine/char_sampler.h"
#include "server/http.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

// A sample costs about a tenth of a millisecond a character: 2000 stay well under a second.
constexpr int64_t kMaxSampleLength = 2000;
constexpr int kMaxPrimerBytes = 1000;

}  // namespace

void add_sample_routes(httplib::Server& s, Context& c) {
  s.Post(R"(/api/jobs/(\d+)/sample)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json job = row(c, "jobs", req);
      if (job.value("kind", "") != "train") throw ApiError(409, "", "only training jobs write text");
      DatasetView d = dataset_view(c, job.value("dataset_id", int64_t{-1}), "dataset_id");
      if (!d.text) throw ApiError(409, "", "this job learned images, not text: classify with it instead");
      json out;
      const fs::path weights = snapshot_weights(c, job, req, out);
      json body = body_object(req);
      SampleOptions o;
      o.model = (fs::path(c.scheduler.job_dir(job["id"])) / "net.prototxt").string();
      o.weights = weights.string();
      o.primer = string_field(body, "primer", false, kMaxPrimerBytes);
      o.length = integer_field(body, "length", 0, kMaxSampleLength, 300);
      o.temperature = number_field(body, "temperature", 0, 10, 1);
      o.seed = static_cast<uint64_t>(integer_field(body, "seed", 0, INT64_MAX, 1));
      o.threads = 1;  // training jobs have the other cores
      // The primer checked here, so errors name the API's field (CharSampler's name --primer).
      std::vector<char32_t> primer;
      try {
        primer = decode_utf8(o.primer, "'primer'");
      } catch (const InputError& e) {
        throw ApiError(400, "primer", e.what());
      }
      const std::vector<std::string>& known = d.class_names;  // the dataset's characters
      for (size_t i = 0; i < primer.size(); ++i)
        if (std::find(known.begin(), known.end(), encode_utf8(primer[i])) == known.end())
          throw ApiError(400, "primer",
                         fmt::format("'primer': character {} (character {}) is not among the {} characters this "
                                     "job learned",
                                     describe_char(primer[i]), i, known.size()));
      // One sample at a time: each runs the net on a core, and requests wait their turn.
      static std::mutex one_at_a_time;
      std::lock_guard<std::mutex> lock(one_at_a_time);
      const auto start = std::chrono::steady_clock::now();
      CharSampler sampler(o);
      std::string text;
      int64_t chars = 0;
      sampler.generate([&](std::string_view ch) {
        text.append(ch);
        ++chars;
      });
      out["text"] = text;
      out["primer"] = o.primer;
      out["characters"] = chars;
      out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return out;
    });
  });
}

}  // namespace bks::server
