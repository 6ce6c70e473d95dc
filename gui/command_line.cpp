#include "command_line.hpp"

#include <QCommandLineParser>
#include <QRegularExpression>

#include <stdexcept>

namespace flashot::gui {
namespace {

struct Options {
  QCommandLineOption key{"key", "Alignment space: an obsm key, X, or xyz (PLY).", "KEY"};
  QCommandLineOption show{"show", "Display space: an obsm key (X_umap, spatial, …) or 'first 3'.", "KEY"};
  QCommandLineOption color_by{"color-by", "Color by an obs column, 'source / target', 'PLY colors' or "
                                          "'transferred labels'.", "COL"};
  QCommandLineOption transfer{"transfer-labels", "Transfer this target column's labels to the source.", "COL"};
  QCommandLineOption backend{"backend", "auto, cpu or cuda.", "NAME"};
  QCommandLineOption blur{"blur", "Blur in data units (0 = automatic: 5% of the data diameter).", "B"};
  QCommandLineOption align{"align", "Align as soon as the files are open."};
  QCommandLineOption register_model{"register", "Register SOURCE onto TARGET (3-D points: PLY xyz or a 3-column "
                                    "obsm entry chosen with --key) as soon as the files are open: rigid, "
                                    "similarity, affine or nonrigid.", "MODEL"};
  QCommandLineOption multiscale{"multiscale", "With --register: the rounds' solves, auto, on or off (flashot "
                                "register --multiscale).", "MODE"};
  QCommandLineOption stack{"stack", "Show the two .h5ad slices stacked in 3-D by their coordinates in obsm KEY "
                           "(the source's KEY_flashot, when present, as its aligned coordinates).", "KEY"};
  QCommandLineOption coupling{"coupling", "With --stack: draw the coupling .h5ad that flashot align --coupling "
                              "wrote.", "FILE"};
  QCommandLineOption screenshot{"screenshot", "Headless: write the view to FILE.png and exit.", "FILE"};
  QCommandLineOption window{"window", "The screenshot shows the whole window (controls, plot), not only the view."};
  QCommandLineOption size{"size", "Window size in headless mode, WxH (default 1280x800).", "WxH"};
  QCommandLineOption help{QStringList{"h", "help"}, "Show this help."};
  QCommandLineOption version{QStringList{"v", "version"}, "Show the version."};
};

void add_options(QCommandLineParser& parser, const Options& o) {
  parser.setApplicationDescription("flashot-gui: align two data sets (.h5ad or .ply) with entropic optimal "
                                   "transport and look at the result.");
  parser.addPositionalArgument("SOURCE", "Source (query) data set, .h5ad or .ply.", "[SOURCE");
  parser.addPositionalArgument("TARGET", "Target (reference) data set.", "[TARGET]]");
  parser.addOptions({o.key, o.show, o.color_by, o.transfer, o.backend, o.blur, o.align, o.register_model, o.multiscale, o.stack, o.coupling, o.screenshot, o.window, o.size,
                     o.help, o.version});
}

}  // namespace

CommandLine parse_command_line(const QStringList& arguments) {
  QCommandLineParser parser;
  const Options o;
  add_options(parser, o);
  if (!parser.parse(arguments)) throw std::invalid_argument(parser.errorText().toStdString());
  CommandLine c;
  c.help = parser.isSet(o.help);
  c.version = parser.isSet(o.version);
  if (c.help || c.version) return c;  // answered before anything else is checked
  const QStringList files = parser.positionalArguments();
  if (files.size() > 2) {
    throw std::invalid_argument("at most two files (source and target), got " + std::to_string(files.size()));
  }
  if (!files.empty()) c.source = files[0];
  if (files.size() > 1) c.target = files[1];
  c.key = parser.value(o.key);
  c.show = parser.value(o.show);
  c.color_by = parser.value(o.color_by);
  c.transfer = parser.value(o.transfer);
  c.backend = parser.value(o.backend);
  c.align = parser.isSet(o.align);
  c.register_model = parser.value(o.register_model);
  c.multiscale = parser.value(o.multiscale);
  c.stack = parser.value(o.stack);
  c.coupling = parser.value(o.coupling);
  if (!c.register_model.isEmpty() && c.register_model != "rigid" && c.register_model != "similarity" &&
      c.register_model != "affine" && c.register_model != "nonrigid") {
    throw std::invalid_argument("--register must be rigid, similarity, affine or nonrigid (got '" +
                                c.register_model.toStdString() + "')");
  }
  if (!c.multiscale.isEmpty() && c.multiscale != "auto" && c.multiscale != "on" && c.multiscale != "off") {
    throw std::invalid_argument("--multiscale must be auto, on or off (got '" + c.multiscale.toStdString() + "')");
  }
  if (!c.multiscale.isEmpty() && c.register_model.isEmpty()) throw std::invalid_argument("--multiscale needs --register MODEL");
  if (c.align && !c.register_model.isEmpty()) throw std::invalid_argument("--align and --register: choose one");
  if (!c.register_model.isEmpty() && c.target.isEmpty()) {
    throw std::invalid_argument("--register needs a SOURCE and a TARGET file");
  }
  if (!c.stack.isEmpty() && c.target.isEmpty()) throw std::invalid_argument("--stack needs a SOURCE and a TARGET file");
  if (!c.coupling.isEmpty() && c.stack.isEmpty()) throw std::invalid_argument("--coupling needs --stack KEY");
  c.screenshot = parser.value(o.screenshot);
  c.whole_window = parser.isSet(o.window);
  if (parser.isSet(o.blur)) {
    bool ok = false;
    const double blur = parser.value(o.blur).toDouble(&ok);
    if (!ok || !(blur >= 0)) {
      throw std::invalid_argument("--blur must be a number ≥ 0 (got '" + parser.value(o.blur).toStdString() + "')");
    }
    c.blur = blur;
  }
  if (parser.isSet(o.size)) {
    static const QRegularExpression pattern("^(\\d{2,5})x(\\d{2,5})$");
    const auto match = pattern.match(parser.value(o.size));
    if (!match.hasMatch()) {
      throw std::invalid_argument("--size must be WIDTHxHEIGHT, e.g. 1280x800 (got '" +
                                  parser.value(o.size).toStdString() + "')");
    }
    c.width = match.captured(1).toInt();
    c.height = match.captured(2).toInt();
  }
  if (c.align && c.target.isEmpty()) throw std::invalid_argument("--align needs a SOURCE and a TARGET file");
  if (c.headless() && c.source.isEmpty()) throw std::invalid_argument("--screenshot needs at least a SOURCE file");
  return c;
}

QString usage_text() {
  QCommandLineParser parser;
  const Options o;
  add_options(parser, o);
  return parser.helpText();
}

}  // namespace flashot::gui
