"""A deterministic generator of user-generated-content relevance data (the demo's default pairs).

The demo must run on a fresh machine with no dataset download, so r3edge ships this generator
instead of data. It imitates what R³A's platform looks like: short ambiguous queries, informal
posts with emoji, hashtags, slang and off-topic chatter, graded by the R³A criteria:

* 2 — a post dedicated to the query that states the exact answer;
* 1 — a post on the query's topic that only partly answers it, or buries the answer in chatter;
* 0 — a post with nothing to do with the query, including hard negatives that share its topic
  words but answer a different need.

Every query also gets auxiliary in-platform posts (R³A's intent evidence). Same seed, same bytes.
Only the standard library is used, so ``r3edge pairs`` works on the base install.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from r3edge.core.pairs import Candidate, QueryCandidates


@dataclass(frozen=True)
class Topic:
    name: str
    queries: tuple[str, ...]
    answers: tuple[str, ...]     # state the exact answer to the topic's queries
    partials: tuple[str, ...]    # on topic, partial or vague
    near_misses: tuple[str, ...]  # share the words, miss the need
    tags: tuple[str, ...]


TOPICS: tuple[Topic, ...] = (
    Topic(
        "sourdough",
        ("sourdough not rising", "why is my sourdough flat", "sourdough starter weak help"),
        ("If your sourdough is flat, your starter is probably not active enough: feed it 1:1:1 twice a day at 24-26°C and only bake when it doubles within 4-6 hours.",
         "Flat loaf fix: let the bulk ferment go until the dough has risen about 50% and is jiggly, then shape tight and cold-proof overnight. Mine went from pancake to proper ear."),
        ("Baked my first sourdough today, it was a bit dense but tasted amazing honestly.",
         "Anyone else feel like sourdough is 90% waiting? Still learning how long to proof lol."),
        ("Sourdough pizza night with the fam, toppings were pesto and burrata.",
         "Selling my extra sourdough starter jars, DM me if you're in the area."),
        ("#sourdough", "#breadtok", "#homebaking"),
    ),
    Topic(
        "kyoto",
        ("kyoto 3 day itinerary", "what to do in kyoto in 3 days", "kyoto first time plan"),
        ("3 days in Kyoto: day 1 Fushimi Inari at 7am then Gion, day 2 Arashiyama bamboo grove and Tenryu-ji, day 3 Kinkaku-ji and Nishiki market. Buy the bus day pass.",
         "My Kyoto 3-day plan that worked: Fushimi Inari early, Kiyomizu-dera + Sannenzaka on day 1, Arashiyama on day 2, golden pavilion and Philosopher's Path on day 3."),
        ("Kyoto was beautiful but so crowded in April, we only managed a few temples.",
         "Just got back from Japan! Tokyo was wild and we spent a couple days in Kyoto too."),
        ("Kyoto-style matcha latte recipe you can make at home.",
         "Looking for a roommate in Osaka, close to Kyoto line, 60k yen/month."),
        ("#kyoto", "#japantravel", "#itinerary"),
    ),
    Topic(
        "laptop",
        ("best budget laptop for students", "cheap laptop for college 2024", "laptop under 500 for uni"),
        ("Best budget student laptop: the Acer Aspire 5 with a Ryzen 5, 16GB RAM and 512GB SSD, around $480. Battery lasts 8 hours of note taking.",
         "For under $500 get a laptop with at least 16GB RAM and an SSD; I recommend the Lenovo IdeaPad Slim 3, survived 3 years of uni for me."),
        ("My laptop for school is kinda slow but it does the job for essays I guess.",
         "Spent way too long comparing laptops this week, specs are so confusing."),
        ("Laptop stickers haul from the campus bookstore, so cute!",
         "Lost my laptop charger in the library again, anyone found a black USB-C one?"),
        ("#studenttech", "#laptop", "#backtoschool"),
    ),
    Topic(
        "marathon",
        ("first marathon training plan", "how many weeks to train for a marathon", "marathon beginner schedule"),
        ("First marathon: plan on 16-20 weeks, 4 runs a week, one long run that grows by ~1.5 km each week up to 32 km, then taper for 3 weeks.",
         "Beginner marathon schedule that got me to the finish: 18 weeks, easy pace for 80% of runs, long run every Sunday, peak 32 km three weeks before race day."),
        ("Ran my first half marathon today, legs are dead but so proud!!",
         "Training for a marathon is eating my whole weekend, is that normal."),
        ("Marathon of Marvel movies this weekend, who's in?",
         "Selling my race bib for the city marathon, can't make it because of work."),
        ("#running", "#marathontraining", "#runnersofinstagram"),
    ),
    Topic(
        "cat",
        ("cat throwing up after eating", "why does my cat vomit food", "cat vomits right after meals"),
        ("Cat vomiting right after eating is usually eating too fast: use a slow feeder bowl and split food into 4 small meals. See a vet if it happens daily or there's blood.",
         "Our vet said regurgitating right after meals = scarfing. Puzzle feeder fixed it in a week. If your cat is also losing weight go to the vet asap."),
        ("My cat has such a sensitive stomach, we've tried like 5 different foods.",
         "Anyone else's cat just stare at the wall at 3am? Also she threw up on the rug again."),
        ("Cat cafe in the city centre is finally open, the kittens are adorable.",
         "Free cat tree, pick up only, slightly scratched."),
        ("#catsofinstagram", "#catcare", "#vetadvice"),
    ),
    Topic(
        "skincare",
        ("skincare routine for oily skin", "oily skin products that work", "what routine for oily acne skin"),
        ("Oily skin routine: gel cleanser morning and night, 2% salicylic acid toner 3x a week, oil-free niacinamide moisturizer, and SPF 50 every morning. Don't skip moisturizer.",
         "What finally worked for my oily skin: gentle foaming cleanser, BHA exfoliant every other night, lightweight gel moisturizer, non-comedogenic sunscreen."),
        ("My skin has been so weird lately, oily in some places and dry in others.",
         "Skincare is so expensive, trying to cut down to just a few products."),
        ("Skincare fridge unboxing, it's pink and tiny and I love it.",
         "Oily hair tips? My scalp gets greasy by noon."),
        ("#skincare", "#oilyskin", "#skincareroutine"),
    ),
    Topic(
        "coffee",
        ("pour over coffee ratio", "how much coffee for v60", "v60 recipe grams"),
        ("V60 ratio: 15 g of coffee to 250 g of water (1:16), water at 93°C, 30 s bloom with 40 g, total brew time about 3 minutes.",
         "My daily pour over: 1:16 ratio, so 20 g coffee and 320 g water, medium-fine grind, bloom 45 s, finish pouring by 2:00."),
        ("Switched from pods to pour over and I'm never going back, so much better.",
         "Pour over mornings are my meditation honestly, still figuring out the grind."),
        ("Coffee shop in the old town has the best cinnamon buns.",
         "Selling my espresso machine, barely used, pick up only."),
        ("#coffee", "#pourover", "#v60"),
    ),
    Topic(
        "rent",
        ("how to negotiate rent", "can i ask landlord for lower rent", "rent negotiation tips"),
        ("To negotiate rent: check comparable listings, offer a longer lease (18-24 months) or paying a few months upfront in exchange for 5-10% off, and ask 60 days before renewal.",
         "Got my rent lowered by $150: showed the landlord 3 cheaper similar units nearby, pointed out I always paid on time, and offered to sign for 2 years."),
        ("Rent went up again this year, this city is getting impossible.",
         "Apartment hunting is exhausting, 12 viewings and nothing yet."),
        ("Rent the runway haul for my cousin's wedding, obsessed with this dress.",
         "Renting a car for the road trip, any company recommendations?"),
        ("#renting", "#apartmentlife", "#moneytips"),
    ),
    Topic(
        "guitar",
        ("learn guitar chords beginner", "first guitar chords to learn", "easiest guitar chords"),
        ("Start with G, C, D, E minor and A minor: with those five open chords you can play hundreds of songs. Practise switching between two chords for 1 minute a day.",
         "Beginner chords order that worked for me: Em, C, G, D, then Am. Learn them one at a time and strum along to slow songs."),
        ("Picked up my guitar again after 5 years, fingers hurt so much lol.",
         "Guitar practice is going slowly but I can almost play a full song now."),
        ("Guitar-shaped cookies for my brother's birthday 🎂.",
         "Selling a guitar amp, 20W, works fine, some scratches."),
        ("#guitar", "#learnguitar", "#musician"),
    ),
    Topic(
        "plants",
        ("monstera yellow leaves", "why are my monstera leaves turning yellow", "monstera leaf yellowing fix"),
        ("Yellow monstera leaves almost always mean overwatering: water only when the top 5 cm of soil is dry, and make sure the pot drains. Cut the yellow leaves off.",
         "Fixed my monstera's yellowing: repotted into chunky aroid mix with perlite, watered every 10-14 days instead of weekly, moved it to bright indirect light."),
        ("My monstera is finally putting out a new leaf after months!!",
         "Plant care is harder than it looks, I have killed three already this year."),
        ("Monstera print phone case haul.",
         "Giving away monstera cuttings, rooted in water, DM me."),
        ("#plantparent", "#monstera", "#houseplants"),
    ),
)

EMOJI = ("😅", "🙏", "✨", "🔥", "😭", "👍", "💯", "🤔", "❤️", "😂", "👀", "🙌")
FILLER = (
    "lol", "tbh", "ngl", "imo", "anyway", "update:", "edit: typo", "thanks in advance!",
    "long post sorry", "not sponsored", "saving this for later", "idk if this helps",
)
OFFTOPIC = (
    "Went to the beach today, the sunset was unreal.",
    "Meal prep Sunday: chicken, rice, broccoli, repeat.",
    "Does anyone know when the new season comes out?",
    "My neighbour's dog barked all night again.",
    "Finally finished that puzzle, 1000 pieces!",
    "Traffic on the ring road was insane this morning.",
)


def _noisy(rng: random.Random, text: str, tags: tuple[str, ...]) -> str:
    """Dress a sentence as a post: emoji, slang, hashtags, the odd lower-casing."""
    parts = [text]
    if rng.random() < 0.6:
        parts.append(rng.choice(EMOJI) * rng.randint(1, 2))
    if rng.random() < 0.4:
        parts.insert(0 if rng.random() < 0.5 else len(parts), rng.choice(FILLER))
    post = " ".join(parts)
    if rng.random() < 0.3:
        post = post.lower()
    if rng.random() < 0.7:
        post += "\n" + " ".join(rng.sample(tags, k=rng.randint(1, len(tags))))
    return post


def _buried(rng: random.Random, answer: str, tags: tuple[str, ...]) -> str:
    """The answer hidden among chatter: R³A's label 1 ("answer unclear or hidden")."""
    chatter = rng.sample(OFFTOPIC, k=2)
    sentences = chatter[:1] + [answer.split(": ")[-1].split(". ")[0] + "?? not sure tho"] + chatter[1:]
    return _noisy(rng, " ".join(sentences), tags)


def generate(
    n_queries: int, n_candidates: int, seed: int = 0, start: int = 0, qid_prefix: str = "ugc"
) -> list[QueryCandidates]:
    """``n_queries`` queries, each with ``n_candidates`` graded, ranked candidates and 3 aux posts.

    Query ``i`` is topic ``i % 10`` with phrasing ``i // 10``; a held-out split takes a ``start``
    past the training queries so that its query texts were never trained on.
    """
    rng = random.Random(seed * 1_000_003 + start)
    out = []
    for qi in range(start, start + n_queries):
        topic = TOPICS[qi % len(TOPICS)]
        query = topic.queries[(qi // len(TOPICS)) % len(topic.queries)]
        others = [t for t in TOPICS if t is not topic]
        pool: list[tuple[str, int]] = []
        for a in topic.answers:
            pool.append((_noisy(rng, a, topic.tags), 2))
        for p in topic.partials:
            pool.append((_noisy(rng, p, topic.tags), 1))
        pool.append((_buried(rng, rng.choice(topic.answers), topic.tags), 1))
        for m in topic.near_misses:
            pool.append((_noisy(rng, m, topic.tags), 0))
        while len(pool) < n_candidates:
            other = rng.choice(others)
            kind = rng.random()
            src = other.answers if kind < 0.5 else other.partials if kind < 0.8 else other.near_misses
            pool.append((_noisy(rng, rng.choice(src), other.tags), 0))
        # Keep the graded posts and fill with negatives, then mimic a first-stage ranker that is
        # decent but not perfect: relevant posts tend to rank higher.
        pool = pool[:n_candidates]
        keyed = sorted(pool, key=lambda p: -(p[1] + rng.random() * 2.5))
        cands = [
            Candidate(docid=f"{qid_prefix}{qi:03d}-d{j:03d}", text=text, label=label, rank=j + 1)
            for j, (text, label) in enumerate(keyed)
        ]
        aux = [_noisy(rng, rng.choice(topic.partials + topic.answers), topic.tags) for _ in range(3)]
        out.append(QueryCandidates(qid=f"{qid_prefix}{qi:03d}", query=query, candidates=cands, aux=aux))
    return out
