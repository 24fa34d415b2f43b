// train/io/jsonl.cpp — the text field of every line of a JSONL file (see jsonl.h).
#include "train/io/jsonl.h"

#include <cstring>

#include "train/io/fileio.h"

namespace ctx {

std::string jsonl_text(const char* begin, const char* end, const std::string& field, const std::string& path) {
  std::string out;
  int64_t line_no = 0;
  for (const char* p = begin; p < end;) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', (size_t)(end - p)));
    const char* stop = nl ? nl : end;
    const char* next = nl ? nl + 1 : end;
    ++line_no;
    if (stop > p && stop[-1] == '\r') --stop;
    const char* q = p;
    while (q < stop && (*q == ' ' || *q == '\t')) ++q;
    if (q < stop) {
      const std::string where = str(path, " line ", line_no);
      const auto doc = parse_json_strict<nlohmann::json>(p, stop, where);
      CTX_CHECK(doc.is_object(), where, ": expected a JSON object with a string field ", quoted_str(field),
                ", got a JSON ", doc.type_name());
      const auto it = doc.find(field);
      CTX_CHECK(it != doc.end(), where, ": the object has no field ", quoted_str(field),
                " (--data-field names the field that holds the text)");
      CTX_CHECK(it->is_string(), where, ": field ", quoted_str(field), " is a JSON ", it->type_name(),
                ", expected a string");
      out += it->get_ref<const std::string&>();
      out += '\n';
    }
    p = next;
  }
  return out;
}

}  // namespace ctx
